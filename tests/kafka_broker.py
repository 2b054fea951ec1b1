"""The test session's Kafka-protocol broker, as pytest fixtures over the broker harness
(loadtest/kafka_broker.py: tansu started on a free loopback port, in-memory storage; a
missing or broken broker is an error, never a skip).

Use from a test module (importing the fixtures under their function names keeps ruff's
F811 quiet):

    from .kafka_broker import KafkaBroker, kafka_broker_fixture  # noqa: F401

    def test_something(kafka_broker: KafkaBroker) -> None:
        kafka_broker.create_topics({"pages": 4})
        ... kafka_broker.bootstrap ...   # "127.0.0.1:PORT"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from loadtest.kafka_broker import (  # noqa: F401 - the harness, for the tests
    EXTERNAL_ENV,
    BrokerError,
    KafkaBroker,
    broker_session,
    create_topics,
    delete_topics,
    free_port,
    high_watermarks,
    read_topic,
    run_sync,
    start_broker,
    topic_ends,
    unique_name,
)


@pytest.fixture(scope="session", name="kafka_broker")
def kafka_broker_fixture() -> Iterator[KafkaBroker]:
    """One tansu broker for the whole test session (memory storage has no retention:
    keep test data small, and use fresh topic / group names per test)."""
    with broker_session() as broker:
        yield broker
        broker.check_alive()  # a broker that died mid-session fails the last test's teardown


@pytest.fixture(name="kafka_topics")
def kafka_topics_fixture(kafka_broker: KafkaBroker) -> Callable[..., dict[str, str]]:
    """Factory: `kafka_topics(pages=4, events=1)` creates fresh uniquely named topics with
    those partition counts and returns {"pages": "pages-<pid>-<n>", ...}."""

    def make(**partitions: int) -> dict[str, str]:
        names = {key: unique_name(key) for key in partitions}
        kafka_broker.create_topics({names[k]: n for k, n in partitions.items()})
        return names

    return make
