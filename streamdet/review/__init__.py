"""The spam team's review desk (`streamdet review`): quilts beside their sources,
judgements kept durably, the precision they measure. A service with its own state, one
module per concern:

- projection: the detector's events folded into the desk's view (verdicts, history,
  clusters, sites), over MutableMapping tables;
- event_feed: that view in embedded mode, following a run's events file;
- embedded: the embedded desk's source (the view, and pages from the state read-only);
- page_view: a quilt beside its sources' own passages (from a state, or from the
  pipeline's records on Kafka);
- lists: quilts newest first with filters, sites by badness, clusters by size;
- highlight: a page's text cut into pieces marked by the sources' spans;
- labels: a judgement (spam / not spam / unsure, note, who, when, what it judged);
- label_store: the labels and the uniform draws in a SQLite file (embedded mode);
- kafka_desk: the desk on Kafka: a faust app whose agents fold the events, docs and
  labels topics into GlobalTables, copied for the desk's threads (its source);
- faust_app: that app's faust App (the brokers' credentials, a short fetch wait);
- kafka_labels: the labels and draws as records of the labels topic (Kafka mode);
- doc_reader: a page's record read from the docs topic by its place;
- sampling: uniform draws of quilts to judge, as Najork drew them;
- precision: the spam share per parameter setting and kind of page (Najork's Table 2);
- desk: the service the web app calls (lists, page, judge, draws, export, precision);
- auth: the desk's credentials (a token, or users with scrypt-hashed passwords);
- web: the Starlette app (HTML and JSON, login, CSRF, security headers);
- cli: `streamdet review` and its actions (sample, export, precision, passwd).
"""
