"""The Kafka desk's faust App: faust's own, reaching the brokers as every streamdet client
does (adapters.kafka.connection: TLS and SASL from the environment), with its consumer's
fetch wait shortened.

faust creates its consumer with a fixed `fetch_max_wait_ms=1500`, and the test broker
answers a fetch with nothing new only after about half of it: the desk's view was up to
0.75 s behind per hop, and an event takes two (the events topic to the agent, the
table's changelog back to every instance): p99 1.6 s against a target of 2 s
(`python -m loadtest.bench_kafka --review-desk`). One consumer reads both the topics and the
changelogs, so one setting moves both hops."""

from __future__ import annotations

import faust
from faust.transport import by_url
from faust.transport.drivers import aiokafka as driver

from ..adapters.kafka import connection

FETCH_WAIT_MS = 100  # the consumer's longest wait for a fetch (faust: 1500)


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_WAIT_MS  # read by its fetcher at start
        return consumer


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(driver.Transport):
    Consumer = _Consumer


class ReviewApp(faust.App):
    """faust.App with `_Transport` for kafka:// brokers."""

    def _new_transport(self):
        url = self.conf.broker_consumer[0]
        if by_url(url) is not driver.Transport:
            return super()._new_transport()
        return _Transport(self.conf.broker_consumer, self)


def credentials(broker: str) -> faust.SASLCredentials | faust.SSLCredentials | None:
    """faust's form of the connection's TLS and SASL settings (None: plaintext)."""
    conn = connection(broker)
    protocol = conn["security_protocol"]
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(username=conn["sasl_plain_username"],
                                     password=conn["sasl_plain_password"],
                                     mechanism=conn["sasl_mechanism"],
                                     ssl_context=conn.get("ssl_context"))
    if protocol == "SSL":
        return faust.SSLCredentials(conn["ssl_context"])
    return None
