"""Parsing Markdown/MDX pages: every construct the book uses, on small hand-written pages."""

from __future__ import annotations

import textwrap

import pytest

from service.ingest.frontmatter import FrontMatterError, split_front_matter
from service.ingest.markdown import Block, ParsedDocument, parse_markdown


def parse(text: str, path: str = "guide/page.mdx", **kwargs: bool) -> ParsedDocument:
    return parse_markdown(textwrap.dedent(text).lstrip("\n"), path, **kwargs)


def all_text(doc: ParsedDocument) -> str:
    return "\n".join(b.render() for s in doc.sections for b in s.blocks)


def blocks(doc: ParsedDocument) -> list[Block]:
    return [b for s in doc.sections for b in s.blocks]


# --- front matter and title -------------------------------------------------------------


def test_front_matter_fields() -> None:
    doc = parse("""
        ---
        title: "Wheel Odometry"
        description: How a rover estimates distance from wheel turns.
        slug: /odometry
        sidebar_position: 3
        tags: [sensors, rovers]
        ---

        # Another heading

        Body text.
        """)
    assert doc.title == "Wheel Odometry"
    assert doc.description == "How a rover estimates distance from wheel turns."
    assert doc.slug == "/odometry"
    assert doc.sidebar_position == 3.0
    assert doc.tags == ("sensors", "rovers")
    assert doc.warnings == ()


def test_tags_as_objects_and_missing_values() -> None:
    front, body = split_front_matter("---\ntags:\n  - label: Alpha\n    permalink: /a\n---\nx\n")
    assert front.tags == ("Alpha",)
    assert front.slug is None
    assert front.sidebar_position is None
    assert body == "x\n"


def test_description_becomes_the_first_passage() -> None:
    doc = parse("""
        ---
        description: A summary written for search engines.
        ---
        Intro paragraph.
        """)
    assert [b.text for b in doc.sections[0].blocks] == [
        "A summary written for search engines.",
        "Intro paragraph.",
    ]


def test_title_falls_back_to_first_h1_then_file_name() -> None:
    assert parse("# Gear Ratios\n\ntext\n").title == "Gear Ratios"
    assert parse("no heading here\n", path="module-x/03-torque-basics.md").title == (
        "torque basics"
    )


def test_broken_yaml_is_a_clear_error_when_strict() -> None:
    text = "---\ntitle: [unclosed\n---\nBody.\n"
    with pytest.raises(FrontMatterError, match=r"docs/bad\.md: invalid YAML front matter"):
        parse_markdown(text, "docs/bad.md", strict=True)


def test_broken_yaml_is_a_warning_when_lenient() -> None:
    doc = parse_markdown("---\ntitle: [unclosed\n---\n# Real Title\n\nBody.\n", "docs/bad.md")
    assert doc.title == "Real Title"
    assert all_text(doc) == "Body."
    assert len(doc.warnings) == 1
    assert "docs/bad.md" in doc.warnings[0]


def test_front_matter_that_is_not_a_mapping() -> None:
    with pytest.raises(FrontMatterError, match="must be a mapping"):
        parse_markdown("---\n- a\n- b\n---\ntext\n", "x.md", strict=True)


def test_unclosed_front_matter_keeps_the_text() -> None:
    doc = parse_markdown("---\ntitle: x\n\nStill here.\n", "x.md")
    assert "Still here." in all_text(doc)
    assert doc.warnings


# --- MDX: imports, comments, components ---------------------------------------------------


def test_mdx_imports_exports_and_comments_are_dropped() -> None:
    doc = parse("""
        import Tabs from '@theme/Tabs';
        import {
          Alpha,
          Beta,
        } from '@site/src/components/Greek';
        export const speed = {
          max: 3,
        };

        {/* a note for authors only */}
        {/*
           spread over
           several lines
        */}

        Visible text {/* inline remark */} continues.
        """)
    assert all_text(doc) == "Visible text continues."


def test_tabs_keep_labels_and_content_but_not_tags() -> None:
    doc = parse("""
        <Tabs groupId="os">
          <TabItem value="ubuntu" label="Ubuntu">

        Install with apt.

          </TabItem>
          <TabItem value="mac" label="macOS">Install with brew.</TabItem>
        </Tabs>
        """)
    text = all_text(doc)
    assert "Ubuntu" in text
    assert "Install with apt." in text
    assert "macOS" in text
    assert "Install with brew." in text
    assert "<" not in text
    assert "TabItem" not in text
    assert "ubuntu" not in text.replace("Ubuntu", "")  # the value prop is not content


def test_component_props_keep_string_literals() -> None:
    doc = parse("""
        <PartsTable
          caption="Parts for the demo rover"
          rows={[
            { id: 'row-motor', part: 'Brushless motor', note: "Needs a 24 V supply" },
            { id: 'row-wheel', part: 'Mecanum wheel', count: 4 },
          ]}
          compact
        />
        """)
    text = all_text(doc)
    assert "Parts for the demo rover" in text
    assert "Brushless motor; Needs a 24 V supply" in text
    assert "Mecanum wheel" in text
    assert "row-motor" not in text
    assert "PartsTable" not in text
    assert "compact" not in text


def test_multiline_template_prop_is_parsed_as_markdown() -> None:
    doc = parse("""
        <Step
          title="Check the version"
          output={`Run this:
        \\`\\`\\`bash
        rover --version
        \\`\\`\\``}
        />
        """)
    kinds = [(b.kind, b.language, b.text) for b in blocks(doc)]
    assert ("paragraph", "", "Check the version") in kinds
    assert ("code", "bash", "rover --version") in kinds


def test_code_component_with_template_child_becomes_code() -> None:
    doc = parse("""
        <CodeBlock language="python" title="hello.py">
        {`def hello():
            return "hi"
        `}
        </CodeBlock>
        """)
    code = [b for b in blocks(doc) if b.kind == "code"]
    assert code == [Block("code", 'def hello():\n    return "hi"', "python")]
    assert "hello.py" in all_text(doc)


def test_details_and_summary_keep_their_text() -> None:
    doc = parse("""
        <details>
        <summary>Show the hint</summary>

        Try a smaller step size.

        </details>
        """)
    assert all_text(doc) == "Show the hint\nTry a smaller step size."


def test_html_comments_are_dropped() -> None:
    assert all_text(parse("<!-- hidden -->\n\nShown <!-- also hidden --> text.\n")) == (
        "Shown text."
    )


# --- code, tables, admonitions, entities --------------------------------------------------


def test_fenced_code_is_kept_verbatim_with_language() -> None:
    source = """
        Before.

        ```xml title="arm.urdf"
        <link name="base">
          <!-- not a comment to strip -->
        </link>
        # not a heading
        ```

        ~~~
        plain  spacing   kept &amp;
        ~~~
        """
    doc = parse(source)
    code = [b for b in blocks(doc) if b.kind == "code"]
    assert code[0].language == "xml"
    assert code[0].text == (
        '<link name="base">\n  <!-- not a comment to strip -->\n</link>\n# not a heading'
    )
    assert code[1].language == ""
    assert code[1].text == "plain  spacing   kept &amp;"
    assert [s.path for s in doc.sections] == [()]
    assert code[0].render().startswith("```xml\n")


def test_indented_fence_in_a_list_is_dedented() -> None:
    doc = parse("""
        1. Check the driver:
           ```bash
           gpu-info --short
           ```
        2. Reboot.
        """)
    assert [b.kind for b in blocks(doc)] == ["paragraph", "code", "paragraph"]
    assert blocks(doc)[1].text == "gpu-info --short"


def test_unclosed_fence_runs_to_the_end() -> None:
    doc = parse("```python\nx = 1\n## inside code\n")
    assert blocks(doc) == [Block("code", "x = 1\n## inside code", "python")]


def test_tables_become_text_rows() -> None:
    doc = parse("""
        | Joint | Range | Notes |
        |:------|------:|-------|
        | Knee  | 0-150° | `<limit>` tag |
        | Hip   | &lt;90° | a \\| b |
        """)
    (table,) = blocks(doc)
    assert table.kind == "table"
    assert table.text.split("\n") == [
        "Joint | Range | Notes",
        "Knee | 0-150° | `<limit>` tag",
        "Hip | <90° | a | b",
    ]


def test_admonitions_keep_title_and_body() -> None:
    doc = parse("""
        :::tip Battery Care
        Store cells at half charge.
        :::

        :::warning[Hot Surfaces]
        Motors get warm.
        :::

        :::note
        Untitled.
        :::
        """)
    assert [b.text for b in blocks(doc)] == [
        "Tip: Battery Care",
        "Store cells at half charge.",
        "Warning: Hot Surfaces",
        "Motors get warm.",
        "Note:",
        "Untitled.",
    ]


def test_entities_and_docusaurus_escapes_are_decoded() -> None:
    doc = parse("Latency \\&lt; 5 ms, jitter &lt;1&nbsp;ms, R&amp;D \\{braces\\} &#169;.\n")
    assert all_text(doc) == "Latency < 5 ms, jitter <1 ms, R&D {braces} ©."


def test_inline_code_is_not_touched() -> None:
    doc = parse("Use `<box>` or `&lt;` and `{x: 1}` in <Em>text</Em>.\n")
    assert all_text(doc) == "Use `<box>` or `&lt;` and `{x: 1}` in text."


def test_autolinks_and_plain_less_than_survive() -> None:
    assert all_text(parse("See <https://example.org/a> if x < 3 or y<2.\n")) == (
        "See https://example.org/a if x < 3 or y<2."
    )


# --- headings -----------------------------------------------------------------------------


def test_headings_give_the_section_structure() -> None:
    doc = parse("""
        # Page Title

        Intro.

        ## Sensors

        About sensors.

        ### Lidar {#lidar-id}

        Spinning lasers.

        #### Range

        Up to 100 m.

        ### **Camera** with [link](https://x.org)

        Pixels.

        ## Actuators ##

        Motors.
        """)
    assert doc.title == "Page Title"
    assert [(s.path, s.level, [b.text for b in s.blocks]) for s in doc.sections] == [
        ((), 0, ["Intro."]),
        (("Sensors",), 2, ["About sensors."]),
        (("Sensors", "Lidar"), 3, ["Spinning lasers."]),
        (("Sensors", "Lidar", "Range"), 4, ["Up to 100 m."]),
        (("Sensors", "Camera with link"), 3, ["Pixels."]),
        (("Actuators",), 2, ["Motors."]),
    ]


def test_heading_text_is_read_as_commonmark_inline() -> None:
    # Underscores inside words are not emphasis (the book's "publisher_member_function.py"
    # and "__init__" lost them to a hand-written emphasis pattern), escapes are literal.
    doc = parse("""
        ## Code (publisher_member_function.py) in `__init__`

        One.

        ## A \\*starred\\* *word* and ![a diagram](d.png)

        Two.
        """)
    assert [s.path for s in doc.sections] == [
        ("Code (publisher_member_function.py) in __init__",),
        ("A *starred* word and a diagram",),
    ]


def test_setext_headings_open_sections() -> None:
    doc = parse("Sensors\n=======\n\nLidar\n-----\n\nSpinning lasers.\n")
    assert doc.title == "Sensors"
    assert [(s.path, s.level) for s in doc.sections] == [(("Lidar",), 2)]


def test_fences_inside_quotes_and_list_items_are_code() -> None:
    doc = parse("""
        > Run it:
        > ```bash
        > ros2 run demo talker
        > ```

        - Then:
          ~~~python
          print("ok")
          ~~~
        """)
    assert [(b.kind, b.language, b.text) for b in blocks(doc)] == [
        ("paragraph", "", "> Run it:"),
        ("code", "bash", "ros2 run demo talker"),
        ("paragraph", "", "- Then:"),
        ("code", "python", 'print("ok")'),
    ]


def test_rows_without_a_delimiter_row_are_text_not_a_table() -> None:
    # GFM needs the |---| row; without it the words stay, as a paragraph.
    assert blocks(parse("| a | b |\n| c | d |\n")) == [Block("paragraph", "| a | b |\n| c | d |")]


def test_nesting_deeper_than_the_library_goes_keeps_every_word() -> None:
    quotes = "".join("> " * depth + f"quote{depth}\n\n" for depth in range(40))
    items = "".join("  " * depth + f"- item{depth}\n" for depth in range(40))
    text = all_text(parse(quotes + items))
    assert all(f"quote{depth}" in text and f"item{depth}" in text for depth in range(40))


def test_text_after_a_tag_that_closes_mid_line_continues_as_a_paragraph() -> None:
    doc = parse("""
        <Card
          title="Grip">Hold tight
        and steady.

        Next.
        """)
    assert [b.text for b in blocks(doc)] == ["Grip", "Hold tight\nand steady.", "Next."]


def test_sections_without_text_are_left_out() -> None:
    doc = parse("# T\n\n## Empty\n\n## Full\n\nText.\n")
    assert [s.path for s in doc.sections] == [("Full",)]


def test_thematic_breaks_and_blank_lines_separate_paragraphs() -> None:
    doc = parse("One\nstill one\n\n---\n\nTwo\n")
    assert [b.text for b in blocks(doc)] == ["One\nstill one", "Two"]


def test_crlf_and_bom_are_handled() -> None:
    doc = parse_markdown("\ufeff---\r\ntitle: Win\r\n---\r\n\r\nText\r\n", "w.md")
    assert doc.title == "Win"
    assert all_text(doc) == "Text"
