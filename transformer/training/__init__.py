"""Training and evaluation (the paper's section 5 and 6): data, the training loop, checkpoint averaging, scores.

    data.py      ``{split}.{lang}`` corpora, token-count batching, the Multi30k download
                 (``python -m transformer.data``)
    step.py      one training step's pieces: the learning-rate schedule (5.3), the loss with label smoothing (5.4),
                 padded batches, validation
    setup.py     what a run starts from: its processes (``torchrun``), its corpus and tokenizer, its model and optimiser
    train.py     ``python -m transformer.train``: arguments, the loop, resume, averaging and export
    average.py   ``python -m transformer.average``: the mean of the last N epoch checkpoints (6.1)
    evaluate.py  ``python -m transformer.evaluate``: sacreBLEU and chrF of a checkpoint on a split
"""
