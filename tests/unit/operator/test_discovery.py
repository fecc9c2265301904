"""The operator's guards against a kopf that resolved its resources too early."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.structs.references import Insights, Resource

from recall.kube.base import Unavailable
from recall.operator.runtime import discovery
from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION
from recall_dev.twin.clock import FakeClock

NEEDED = (BATCH_PLURAL, JOB_PLURAL)


class Answers:
    """Discovery that answers from a script, and a clock that moves only when slept."""

    def __init__(self, *answers: frozenset[str] | Exception) -> None:
        self.answers = list(answers)
        self.clock = FakeClock(start=0.0)
        self.asked = 0

    def served_plurals(self) -> frozenset[str]:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def now(self) -> float:
        return self.clock.monotonic()


def wait(answers: Answers, timeout: float = 30) -> None:
    discovery.wait_served(answers, NEEDED, timeout, clock=answers.clock)


def test_wait_served__returns_once_every_resource_is_listed() -> None:
    answers = Answers(
        Unavailable("the request has been made before all known HTTP paths have been installed"),
        frozenset(),
        frozenset({BATCH_PLURAL}),
        frozenset(NEEDED),
    )
    wait(answers)
    assert answers.asked == 4


def test_wait_served__names_what_is_missing_and_why_after_the_timeout() -> None:
    answers = Answers(frozenset({BATCH_PLURAL}))
    with pytest.raises(discovery.NotServed) as refused:
        wait(answers, timeout=5)
    message = str(refused.value)
    assert f"does not serve {GROUP}/{VERSION} {JOB_PLURAL} (not listed, waited 5 s)" in message
    assert "are the CRDs installed?" in message
    assert answers.now == pytest.approx(5)


def test_wait_served__keeps_the_last_error_as_the_reason() -> None:
    answers = Answers(Unavailable("connection refused"))
    with pytest.raises(discovery.NotServed, match="connection refused, waited 3 s"):
        wait(answers, timeout=3)


def resolved(*plurals: str, group: str = GROUP) -> Insights:
    insights = Insights()
    insights.watched_resources.update(Resource(group, VERSION, p) for p in plurals)
    insights.ready_resources.set()
    return insights


def check(insights: Insights) -> list[str]:
    stopped: list[str] = []
    asyncio.run(discovery.check_insights(insights, (BATCH_PLURAL,), stopped.append))
    return stopped


def test_check_insights__stops_the_operator_when_kopf_resolved_no_batches() -> None:
    stopped = check(resolved("leases", group="coordination.k8s.io"))
    assert len(stopped) == 1
    assert f"{GROUP}/{VERSION} {BATCH_PLURAL}" in stopped[0]


def test_check_insights__lets_an_operator_that_watches_batches_run() -> None:
    assert check(resolved(BATCH_PLURAL)) == []


def test_check_insights__waits_until_kopf_has_resolved() -> None:
    async def scenario() -> list[str]:
        insights = Insights()
        stopped: list[str] = []
        task = asyncio.create_task(
            discovery.check_insights(insights, (BATCH_PLURAL,), stopped.append)
        )
        await asyncio.sleep(0.01)
        assert not task.done()  # nothing resolved yet: nothing to judge
        insights.watched_resources.add(Resource(GROUP, VERSION, BATCH_PLURAL))
        insights.ready_resources.set()
        await task
        return stopped

    assert asyncio.run(scenario()) == []
