"""The spam team's review desk: judgements of quilts, kept durably, the precision they
measure, and what a reviewer looks at. No command serves it yet (CHANGELOG). A service
with its own state, one module per concern:

- projection: the detector's events folded into the desk's view (verdicts, history,
  clusters, sites), over MutableMapping tables;
- event_feed: that view in embedded mode, following a run's events file;
- page_view: a quilt beside its sources' own passages (from a state);
- labels: a judgement (spam / not spam / unsure, note, who, when, what it judged);
- label_store: the labels and the uniform draws in a SQLite file (embedded mode);
- sampling: uniform draws of quilts to judge, as Najork drew them;
- precision: the spam share per parameter setting and kind of page (Najork's Table 2);
- auth: the desk's credentials (a token, or users with scrypt-hashed passwords).
"""
