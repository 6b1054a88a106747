"""Figures as plain functions of arrays (plotly, the all-heads grid, the first screen's SVG) and the head
statistics they show: shared by the page, the notebook and the offline page."""
