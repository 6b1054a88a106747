"""The Streamlit attention explorer: ``streamlit run app/main.py``.

In floors, bottom up (docs/code.md): ``app.drawing`` (figures from arrays, head statistics), ``app.parts`` (each
offline view described once) and ``app.registry`` (the list of views) import no Streamlit, nor do
``app.compute.inference`` (model work), ``app.notebook`` and ``app.report``; ``app.compute.cached`` wraps the model
work in Streamlit caches; ``app.page`` is the page's frame, ``app.views`` its views, ``app.main`` the page itself.
"""
