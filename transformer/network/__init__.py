"""The network of the paper (section 3), plain PyTorch: what a reader holds beside Figure 1.

    config.py      ``TransformerConfig``: every size and choice of the model (saved as ``config.json``)
    positional.py  the sinusoidal positional encoding (3.5)
    masks.py       padded batches and the attention masks (padding, causal)
    attention.py   scaled dot-product and multi-head attention (3.2), with the decoding step's key/value cache
    model.py       the encoder and decoder layers with their residual + norm and feed-forward sub-layers (3.1, 3.3),
                   embeddings (3.4), ``Transformer``
    kinds.py       the three uses of attention (3.2.3): names, layers per kind, head masks, decoder input, head
                   statistics
    outputs.py     what a forward pass returns (``Seq2SeqOutput``: every attention weight, per layer and head)
    projection.py  the output projection to the vocabulary (3.4)
    dropout.py     the dropout the layers use (5.4)
    kv_cache.py    the decoder's key/value cache for incremental decoding
    weights.py     the decoding weight layout and the post-norm initialisation scale
"""
