"""A sentence's analysis and what is computed beyond it: the translation with every attention (``inference``), the
probes beyond attention (``probes``, ``patching``), a whole test set's table (``tables``, ``table_inputs``), and on
top ``cached``: ``Model``, the handle the page and its views hold, with the Streamlit caches over that work, each job
counted against the request's limits (``app.limits``)."""
