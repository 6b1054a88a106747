"""Checkpoints in and out: from Hugging Face, to the Hub, to CTranslate2 (the commands, ``python -m
transformer.convert``, ``publish`` and ``ctranslate2_export``, are the modules of the same names at the top).

    convert.py             a Hugging Face checkpoint as one of ours
    publish.py             a checkpoint with its model card for a Hub model repo: the files, the card, the upload
    ctranslate2_export.py  a checkpoint as a CTranslate2 model
"""
