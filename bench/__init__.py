"""Benchmarks against the peers: ``python -m bench`` (``--quick`` for a smoke run, ``--json`` for machines).

Our model against ``torch.nn.Transformer`` (training), against CTranslate2 on the same weights (batch
translation), and the app's own latency, load time and memory; see ``bench/run.py``.
"""
