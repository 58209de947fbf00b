"""The out-of-corpus term check: a lexical signal on top of dense retrieval.

Dense similarity alone cannot tell "how do I set up a catkin workspace?" from questions the
corpus does answer: the embedding of a ROS 1 build tool lands next to ROS 2 build pages. What
gives such a question away is a specific term (a name, an acronym, a tool) that the corpus
never mentions. This module picks those terms out of a query; the store asks whether any
chunk contains them, and when one is absent every score is multiplied by a penalty.

"Specific" is decided with the embedder's own tokenizer: a word the model's vocabulary holds
whole is ordinary language (paraphrases use such words freely, so their absence proves
nothing), while a word it has to split into pieces, or one with digits, is a rare term.
Measured on tests/eval/questions.jsonl with the default model (see the ingestion notes):
without the check 4 of 8 unanswerable questions are rejected at the default threshold, with
it 8 of 8, and recall@5 and MRR of the answerable ones do not change.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Words too common to be a question's subject, whatever the tokenizer says of them.
STOPWORDS = frozenset(
    """
    about above after again against also among and any are because been before being below
    between both but can cannot could did does doing down during each few for from further
    had has have having her here hers him his how into its itself just more most must not
    now off once only other our ours out over own same she should some such than that the
    their theirs them then there these they this those through too under until very was
    were what when where which while who whom why will with would you your yours
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
_WORD = re.compile(r"[^\W_]+")  # the store's word tokenizer: alphanumeric runs, lowercased


class TermCheck:
    """Finds the specific terms of a query, to be looked up in the corpus."""

    def __init__(self, count_tokens: Callable[[str], int], *, penalty: float = 0.6) -> None:
        if not 0.0 <= penalty <= 1.0:
            raise ValueError("penalty must be within [0, 1]")
        self._count_tokens = count_tokens
        # Counting includes special tokens ([CLS], [SEP]); a plain short word shows how many.
        self._baseline = count_tokens("the")
        self.penalty = penalty

    def specific_terms(self, query: str) -> list[str]:
        """Lower-cased terms of the query that are rare words, in order, without repeats."""
        terms: list[str] = []
        for word in self.words(query):
            if len(word) < 3 or word in STOPWORDS or word in terms:
                continue
            if any(ch.isdigit() for ch in word) or self._count_tokens(word) > self._baseline:
                terms.append(word)
        return terms

    @staticmethod
    def words(text: str) -> list[str]:
        """The text's words as the store tokenizes them: alphanumeric runs, lower-cased."""
        return _WORD.findall(text.lower())

    @staticmethod
    def variants(term: str) -> str:
        """The term and its singular, space-separated, for a match-any lookup."""
        if len(term) > 4 and term.endswith("s") and not term.endswith("ss"):
            return f"{term} {term[:-1]}"
        return term
