"""The Streamlit attention explorer: ``streamlit run app/main.py``.

In floors, bottom up (docs/code.md): ``app.drawing`` (figures from arrays, head statistics), ``app.models`` (which
models, loading, model cards), ``app.limits`` (a request's work, the caches' byte budget), ``app.analysis`` (a
sentence's analysis, the probes beyond attention, a test set's table), ``app.parts`` (each offline view described
once) and ``app.registry`` (the list of views) import no Streamlit, nor do ``app.notebook`` and ``app.report``; but
``app.analysis.cached``, which wraps the model work in Streamlit caches; ``app.page`` is the page's frame,
``app.views`` its views, ``app.main`` the page itself.
"""
