"""Training (the paper's section 5) and checkpoint averaging (section 6): the loop, its pieces, the mean of step files.

    step.py      one training step's pieces: the learning-rate schedule (5.3), the loss with label smoothing (5.4),
                 token-count batching and padded batches, validation
    setup.py     what a run starts from: its processes (``torchrun``), its corpus and tokenizer, its model and optimiser
    train.py     the loop of ``python -m transformer.train``: resume, averaging and export
    average.py   the mean of the last N step files (6.1), re-exported as a checkpoint
                 (``python -m transformer.average``)

Reading the corpus and scoring translations: ``transformer.evaluation``; the commands: ``transformer/train.py``,
``transformer/average.py``, ``transformer/evaluate.py``, ``transformer/data.py``.
"""
