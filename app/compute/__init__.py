"""The work behind the page, without widgets: the model catalogue and loading, the analysis of a sentence,
the probes beyond attention, the caches within their byte budget, and the work budget of a request."""
