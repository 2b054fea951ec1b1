"""Spam ranking (SPEC §10): a score per quilted or partially duplicated page, blind and
informed by the review desk's labels. features (a page's signals), model (the score and
its training), why (the signals that decided it), rank (the ranked list), reading (the
inputs from a state), cli (`streamdet label`, `streamdet rank`)."""
