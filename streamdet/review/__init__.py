"""The spam team's review desk (`streamdet review`): quilts beside their sources,
judgements kept durably, the precision they measure. A service with its own state, one
module per concern:

- projection: the detector's events folded into the desk's view (verdicts, history,
  clusters, sites), over MutableMapping tables;
- event_feed: that view in embedded mode, following a run's events file;
- embedded: the embedded desk's source (the view, and pages from the state read-only);
- page_view: a quilt beside its sources' own passages (from a state);
- lists: quilts newest first with filters, sites by badness, clusters by size;
- highlight: a page's text cut into pieces marked by the sources' spans;
- labels: a judgement (spam / not spam / unsure, note, who, when, what it judged);
- label_store: the labels and the uniform draws in a SQLite file (embedded mode);
- sampling: uniform draws of quilts to judge, as Najork drew them;
- precision: the spam share per parameter setting and kind of page (Najork's Table 2);
- desk: the service the web app calls (lists, page, judge, draws, export, precision);
- auth: the desk's credentials (a token, or users with scrypt-hashed passwords);
- web: the Starlette app (HTML and JSON, login, CSRF, security headers);
- cli: `streamdet review` and its actions (sample, export, precision, passwd).
"""
