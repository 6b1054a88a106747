"""Reading a parallel corpus and scoring translations of it, below ``training/`` and ``interpret/`` (both read and
score splits; neither imports the other for it).

    data.py    ``{split}.{lang}`` corpora (``read_parallel``, ``DataError``) and the Multi30k download
    scores.py  a split translated in length-sorted batches (``translate_all``) and scored with sacreBLEU (``score``:
               BLEU, chrF, lowercased Moses-tokenized BLEU)

The commands that use them are at the top: ``python -m transformer.data``, ``python -m transformer.evaluate``.
"""
