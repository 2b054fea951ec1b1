"""`streamdet alerts`: new quilts, grouped per registered domain, POSTed to a webhook.

A service with its own state (its position file), one module per concern:

- config: the options and their checks;      - position: the SQLite position file;
- grouping: per-domain groups, page evidence; - bodies: JSON and Slack bodies;
- delivery: POST with retries (httpx, tenacity); - dead_letters: undeliverable alerts, --replay;
- commit_order: what may be committed;       - alerter: dedupe, windows, queue, rate limit;
- lifecycle: the tasks and their wind-down;  - file_source, kafka_source: the inputs;
- runner: run_alerts;  timing: the clock;    - stats: the run's counts; cli: the command.

What it does and guarantees, for its users: docs/alerts.md.
"""

from typing import TYPE_CHECKING, Any

from .config import AlertsConfig, AlertsError

if TYPE_CHECKING:
    from .runner import run_alerts
    from .stats import Stats

__all__ = ["AlertsConfig", "AlertsError", "Stats", "run_alerts"]


def __getattr__(name: str) -> Any:
    """The service's modules load on first use: `streamdet`'s parser reads the options
    (cli, config) of every command, and the others should not pay for this one."""
    if name == "run_alerts":
        from .runner import run_alerts
        return run_alerts
    if name == "Stats":
        from .stats import Stats
        return Stats
    raise AttributeError(name)
