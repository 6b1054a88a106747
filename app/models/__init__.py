"""Which models the explorer offers and what it says of them, without Streamlit: the checkpoint list, Hub downloads,
public mode's allow-list and loading (``catalog``), and a loaded model's card (``card``). The bottom floor of the
model's side of the app: it imports nothing else of the app."""
