"""The sharded engine as a harness pipeline: `sharded_pipeline(...)` has the harness's
`records, params, batches -> rows` shape. It publishes the records batch by batch to the
simulation of loadtest/sharded.py (engine.shards on in-memory topics under a random
schedule of steps, crashes, lost disks and late commits), runs it until idle and reads
the rows, events and views back.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.sharded import Rows, Simulation, analysed
from streamdet.engine.params import Params
from streamdet.engine.site_shard import SITE_SHARD
from streamdet.reading.views import neighbourhoods_of, sites_of


def sharded_pipeline(records: list[dict], params: Params, batches: Sequence[int], *,
                     shards: int = 3, seed: int = 0, crash_rate: float = 0.0,
                     wipe_rate: float = 0.0, lag_rate: float = 0.0, dup_rate: float = 0.0,
                     events: list[dict] | None = None, stats: dict | None = None,
                     partials: list[dict] | None = None,
                     phrases: list[dict] | None = None, sites: list[dict] | None = None,
                     hoods: list[dict] | None = None, labels: dict | None = None,
                     copies: list[dict[str, list[str]]] | None = None) -> Rows:
    """Records published in `batches` (the stream cut as it arrives), shards running
    in between on a random schedule, then run until idle; `labels[i]` (chunk keys) are
    labelled before batch i; `copies` gets each doc shard's partners from both sides of
    every page (engine.pair_index), the figures its spam scores read of pairs."""
    sim = Simulation(params, shards, seed, crash_rate, wipe_rate, lag_rate)
    pages = analysed(records, params)
    i = 0
    for n, b in enumerate(batches):
        if labels and n in labels:
            sim.label(labels[n], "label")
        for page in pages[i : i + b]:
            sim.publish(page)
            if sim.rng.random() < dup_rate:
                sim.redeliver()
        i += b
        for _ in range(sim.rng.randint(0, 3 * shards)):
            k = sim.rng.randrange(3 * shards)
            sim.step(("doc", "gram", "pages")[k // shards], k % shards)
    for page in pages[i:]:
        sim.publish(page)
    sim.run_until_idle()
    if events is not None:
        events.extend(sim.events)
    if stats is not None:  # what the schedule did: tests check that it crashed and wiped
        stats.update(crashes=sim.crashes, wipes=sim.wipes, resent=dict(sim.resent),
                     recovered=sim.recovered, resumed=sim.resumed)
    if partials is not None:
        partials.extend(sim.partial_rows())
    if phrases is not None:
        phrases.extend(sim.phrase_rows())
    if copies is not None:
        copies.extend(sim.pair_copies())
    if sites is not None:  # SPEC §8: every site, from the site shard
        sites.extend(sites_of(sim.doc[SITE_SHARD].state.store, params, min_pages=1))
    if hoods is not None:
        hoods.extend(neighbourhoods_of(sim.doc[SITE_SHARD].state.store, 1))
    return sim.rows()
