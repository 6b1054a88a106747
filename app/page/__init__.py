"""The Streamlit page: the frame (input, translation), the sidebar, session state and the address, the
shared widgets and the big heatmap, and what makes the first screen fast (preload, warm)."""
