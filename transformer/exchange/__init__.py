"""Checkpoints in and out: from Hugging Face, to the Hub, to CTranslate2 (each a command).

    convert.py             ``python -m transformer.convert --from-hf ID --out DIR``: a Hugging Face checkpoint as
                           one of ours
    publish.py             ``python -m transformer.publish``: a checkpoint with its model card to a Hub model repo
    ctranslate2_export.py  ``python -m transformer.ctranslate2_export``: a checkpoint as a CTranslate2 model
"""
