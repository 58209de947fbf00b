"""Lines of code blocks are quotable: commands when the question asks for one, lines that
share its words (issue 27)."""

from __future__ import annotations

from service.agent.commands import asks_for_command, code_blocks, code_lines, command_pieces
from service.domain import ResponseStatus
from service.retrieval.base import Embedder
from tests.agent.support import FakeRetriever, chunk, collect, completed, make_agent, request
from tests.agent.test_extractive import embedder as extractive_embedder

embedder = extractive_embedder  # the module-scoped fixture, under its own name

PAGE = """Building a workspace compiles every package in its src folder.

```bash
# build everything
colcon build --symlink-install
source install/setup.bash
```

The build writes its results next to the sources.

```python
import rclpy
```

```
$ ros2 run turtlesim turtlesim_node
Starting turtlesim...
```
"""


def test_command_lines_are_read_from_shell_blocks_and_prompts_only() -> None:
    assert [p.text for p in command_pieces(PAGE)] == [
        "colcon build --symlink-install",
        "source install/setup.bash",
        "ros2 run turtlesim turtlesim_node",
    ]
    assert all(p.kind == "command" for p in command_pieces(PAGE))


def test_a_question_asks_for_a_command_by_its_verbs() -> None:
    assert asks_for_command("Which command builds the workspace?")
    assert asks_for_command("How do I launch the simulator?")
    assert not asks_for_command("What is a ROS 2 topic?")


async def test_an_extractive_answer_quotes_the_command_asked_for(embedder: Embedder) -> None:
    question = "Which command builds a colcon workspace with symlink install?"
    retriever = FakeRetriever()
    retriever.add(question, (chunk("build", PAGE, title="Workspaces"), 0.8))
    agent, _ = make_agent(None, retriever, strategy="extractive", embedder=embedder)
    result = completed(await collect(agent.run(request(question)))).result
    assert result.status is ResponseStatus.SUCCESS
    assert "`colcon build --symlink-install`" in result.answer
    [span] = [c for c in result.citations if "colcon" in result.answer[c.start : c.end]]
    assert PAGE[span.quote_start : span.quote_end].startswith("colcon build --symlink-install")
    assert span.support == 1.0  # quoted verbatim from the code block

    plain = "What does building a workspace compile?"
    retriever.add(plain, (chunk("build", PAGE, title="Workspaces"), 0.8))
    answer = completed(await collect(agent.run(request(plain)))).result.answer
    assert "`" not in answer, "no command quoted when none is asked for"


async def test_a_command_from_a_chunk_that_is_all_code_is_quoted(embedder: Embedder) -> None:
    """A chunk holding only a code block stores piece vectors for no pieces (0 rows): its
    command lines are embedded at question time, not looked up there."""
    from dataclasses import replace

    code = "```bash\ncolcon build --symlink-install\n```\n"
    stored = replace(chunk("code", code, title="Workspaces"), piece_vectors=[])
    question = "Which command builds the workspace?"
    retriever = FakeRetriever()
    retriever.add(question, (stored, 0.7))
    agent, _ = make_agent(None, retriever, strategy="extractive", embedder=embedder)
    result = completed(await collect(agent.run(request(question)))).result
    assert result.status is ResponseStatus.SUCCESS
    assert "`colcon build --symlink-install`" in result.answer


CONFIG_PAGE = """The planner node asks a language model for a plan of robot actions.

```yaml
task_planner_node:
  ros__parameters:
    temperature: 0.3
    model: "gpt-4o"
```

```python
def plan(self, request):
    rclpy.spin_once()
    return self.client.complete(request, max_tokens=512)
```

```xml
<link name="base_link">
  <mass value="1.0"/>
</link>
```

```
┌──────────────┐
│ Planner node │
└──────────────┘
```
"""


def test_code_lines_are_the_lines_that_state_something() -> None:
    assert [p.text for p in code_lines(CONFIG_PAGE)] == [
        "temperature: 0.3",
        'model: "gpt-4o"',
        "return self.client.complete(request, max_tokens=512)",
        '<mass value="1.0"/>',
    ], "no block openers (def, keys, tags), bare calls or box drawings"
    assert all(p.kind == "code" for p in code_lines(CONFIG_PAGE))


async def test_a_code_line_sharing_the_questions_words_is_quoted(embedder: Embedder) -> None:
    question = "What temperature does the planner node use for the language model?"
    retriever = FakeRetriever()
    retriever.add(question, (chunk("planner", CONFIG_PAGE, title="Planner"), 0.8))
    agent, _ = make_agent(None, retriever, strategy="extractive", embedder=embedder)
    result = completed(await collect(agent.run(request(question)))).result
    assert result.status is ResponseStatus.SUCCESS
    assert '`temperature: 0.3` `model: "gpt-4o"`' in result.answer, "with its short block"
    [span] = [c for c in result.citations if "temperature" in result.answer[c.start : c.end]]
    assert CONFIG_PAGE[span.quote_start : span.quote_end].startswith("temperature: 0.3")

    unrelated = "What does the planner node ask for?"
    retriever.add(unrelated, (chunk("planner", CONFIG_PAGE, title="Planner"), 0.8))
    answer = completed(await collect(agent.run(request(unrelated)))).result.answer
    assert "`" not in answer, "no code line shares a word with the question"


def test_imports_and_one_line_docstrings_are_no_code_lines() -> None:
    page = (
        "```python\nfrom sensor_msgs.msg import Imu\nimport rclpy\n"
        '"""Detects speech in audio."""\nFRAME_MS = 30  # 10, 20 or 30 ms\n```\n'
        "```cpp\n#include <rclcpp/rclcpp.hpp>\nusing namespace std;\nint rate = 10;\n```\n"
    )
    assert [p.text for p in code_lines(page)] == [
        "FRAME_MS = 30  # 10, 20 or 30 ms",
        "int rate = 10",
    ]


def test_code_blocks_group_the_code_lines_by_block() -> None:
    assert [[p.text for p in block] for block in code_blocks(CONFIG_PAGE)] == [
        ["temperature: 0.3", 'model: "gpt-4o"'],
        ["return self.client.complete(request, max_tokens=512)"],
        ['<mass value="1.0"/>'],
        [],
    ]
    assert [p.text for b in code_blocks(CONFIG_PAGE) for p in b] == [
        p.text for p in code_lines(CONFIG_PAGE)
    ]


async def test_a_command_question_may_be_answered_by_a_code_line(embedder: Embedder) -> None:
    """Asking for a command does not keep the other code lines out: the value may be set in
    a file rather than typed."""
    page = (
        "The world file sets the physics of the simulation.\n\n"
        '```xml\n<physics type="ode">\n  <real_time_factor>0.0</real_time_factor>\n'
        "</physics>\n```\n\n```bash\ngz sim world.sdf\n```\n"
    )
    question = "How do I run the simulation with no real time factor limit?"
    assert asks_for_command(question)
    retriever = FakeRetriever()
    retriever.add(question, (chunk("world", page, title="Worlds"), 0.8))
    agent, _ = make_agent(None, retriever, strategy="extractive", embedder=embedder)
    answer = completed(await collect(agent.run(request(question)))).result.answer
    assert "`<real_time_factor>0.0</real_time_factor>`" in answer


def test_a_code_lines_block_does_not_quote_a_chosen_command_twice() -> None:
    from service.agent.quote_context import Candidate, code_start, with_continuations
    from service.domain import ScoredChunk, Source
    from service.text.sentences import split_pieces

    source = Source(ScoredChunk(chunk("build", PAGE, title="Workspaces"), 0.8), 1)
    own = split_pieces(PAGE)
    command = command_pieces(PAGE)[0]
    comment = code_lines(PAGE)[0]
    assert (command.text, comment.text) == ("colcon build --symlink-install", "# build everything")
    chosen = [
        Candidate(source, len(own), command),
        Candidate(source, code_start(source, own), comment),
    ]
    texts = [c.text for c in with_continuations(chosen, {source.hit.chunk.chunk_id: own})]
    assert texts.count("colcon build --symlink-install") == 1
    assert "source install/setup.bash" in texts, "the rest of the block"
