"""What an engine is prompted with: the vocabulary's first phrases, the context's last words,
and no context that repeats itself."""

from __future__ import annotations

from recall.engines.prompt import hotwords, prompt_of


def test_hotwords__first_phrases_that_fit() -> None:
    assert hotwords(None) is None and hotwords(["  ", ""]) is None
    assert hotwords(["Zarvethia", " Quonbril   Station "]) == "Zarvethia, Quonbril Station"
    many = [f"name{i:03d}" for i in range(200)]
    cut = hotwords(many, limit=40)
    assert cut == ", ".join(many[:4])


def test_prompt__the_last_whole_words() -> None:
    said = "the council met on tuesday evening to discuss the budget for public transport"
    assert prompt_of(said) == said
    tail = prompt_of(said, limit=30)
    assert tail is not None and said.endswith(tail) and len(tail) <= 30
    assert tail.split()[0] in said.split()  # no word cut in half
    assert prompt_of("") is None


def test_prompt__a_repetition_loop_is_not_carried_over() -> None:
    assert prompt_of("Thank you. " * 40) is None
    assert prompt_of("I think so. " * 3 + "Then the council voted on the new budget.") is not None
