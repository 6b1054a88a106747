"""The Streamlit attention explorer: ``streamlit run app/main.py``.

``app.analysis`` (numpy statistics), ``app.views`` (plotly figures) and ``app.inference`` (model work)
import no Streamlit; ``app.cached`` wraps the model work in Streamlit caches; ``app.main`` is the page.
"""
