"""Source and target language pickers for a multilingual model (NLLB-200, M2M100): language names, not codes,
searchable (a Streamlit selectbox filters as you type). Shown only when the model's tokenizer lists languages."""

from __future__ import annotations

import streamlit as st

from transformer import Translator

from . import params
from .state import SRC_LANG, TGT_LANG  # the pickers' session-state keys, read by ``state.settings_from_state``

# ISO 639-3 (NLLB-200's FLORES-200 codes: ``eng_Latn``) and ISO 639-1 (M2M100's: ``en``) -> English names
NAMES_639_3 = {
    "ace": "Acehnese", "acm": "Mesopotamian Arabic", "acq": "Ta'izzi-Adeni Arabic", "aeb": "Tunisian Arabic",
    "afr": "Afrikaans", "ajp": "South Levantine Arabic", "aka": "Akan", "als": "Tosk Albanian", "amh": "Amharic",
    "apc": "North Levantine Arabic", "arb": "Modern Standard Arabic", "ars": "Najdi Arabic",
    "ary": "Moroccan Arabic", "arz": "Egyptian Arabic", "asm": "Assamese", "ast": "Asturian", "awa": "Awadhi",
    "ayr": "Central Aymara", "azb": "South Azerbaijani", "azj": "North Azerbaijani", "bak": "Bashkir",
    "bam": "Bambara", "ban": "Balinese", "bel": "Belarusian", "bem": "Bemba", "ben": "Bengali", "bho": "Bhojpuri",
    "bjn": "Banjar", "bod": "Standard Tibetan", "bos": "Bosnian", "bug": "Buginese", "bul": "Bulgarian",
    "cat": "Catalan", "ceb": "Cebuano", "ces": "Czech", "cjk": "Chokwe", "ckb": "Central Kurdish",
    "crh": "Crimean Tatar", "cym": "Welsh", "dan": "Danish", "deu": "German", "dik": "Southwestern Dinka",
    "dyu": "Dyula", "dzo": "Dzongkha", "ell": "Greek", "eng": "English", "epo": "Esperanto", "est": "Estonian",
    "eus": "Basque", "ewe": "Ewe", "fao": "Faroese", "fij": "Fijian", "fin": "Finnish", "fon": "Fon",
    "fra": "French", "fur": "Friulian", "fuv": "Nigerian Fulfulde", "gaz": "West Central Oromo",
    "gla": "Scottish Gaelic", "gle": "Irish", "glg": "Galician", "grn": "Guarani", "guj": "Gujarati",
    "hat": "Haitian Creole", "hau": "Hausa", "heb": "Hebrew", "hin": "Hindi", "hne": "Chhattisgarhi",
    "hrv": "Croatian", "hun": "Hungarian", "hye": "Armenian", "ibo": "Igbo", "ilo": "Ilocano", "ind": "Indonesian",
    "isl": "Icelandic", "ita": "Italian", "jav": "Javanese", "jpn": "Japanese", "kab": "Kabyle", "kac": "Jingpho",
    "kam": "Kamba", "kan": "Kannada", "kas": "Kashmiri", "kat": "Georgian", "kaz": "Kazakh", "kbp": "Kabiyè",
    "kea": "Kabuverdianu", "khk": "Halh Mongolian", "khm": "Khmer", "kik": "Kikuyu", "kin": "Kinyarwanda",
    "kir": "Kyrgyz", "kmb": "Kimbundu", "kmr": "Northern Kurdish", "knc": "Central Kanuri", "kon": "Kikongo",
    "kor": "Korean", "lao": "Lao", "lij": "Ligurian", "lim": "Limburgish", "lin": "Lingala", "lit": "Lithuanian",
    "lmo": "Lombard", "ltg": "Latgalian", "ltz": "Luxembourgish", "lua": "Luba-Kasai", "lug": "Ganda",
    "luo": "Luo", "lus": "Mizo", "lvs": "Standard Latvian", "mag": "Magahi", "mai": "Maithili",
    "mal": "Malayalam", "mar": "Marathi", "min": "Minangkabau", "mkd": "Macedonian", "mlt": "Maltese",
    "mni": "Meitei", "mos": "Mossi", "mri": "Maori", "mya": "Burmese", "nld": "Dutch", "nno": "Norwegian Nynorsk",
    "nob": "Norwegian Bokmål", "npi": "Nepali", "nso": "Northern Sotho", "nus": "Nuer", "nya": "Nyanja",
    "oci": "Occitan", "ory": "Odia", "pag": "Pangasinan", "pan": "Eastern Panjabi", "pap": "Papiamento",
    "pbt": "Southern Pashto", "pes": "Western Persian", "plt": "Plateau Malagasy", "pol": "Polish",
    "por": "Portuguese", "prs": "Dari", "quy": "Ayacucho Quechua", "ron": "Romanian", "run": "Rundi",
    "rus": "Russian", "sag": "Sango", "san": "Sanskrit", "sat": "Santali", "scn": "Sicilian", "shn": "Shan",
    "sin": "Sinhala", "slk": "Slovak", "slv": "Slovenian", "smo": "Samoan", "sna": "Shona", "snd": "Sindhi",
    "som": "Somali", "sot": "Southern Sotho", "spa": "Spanish", "srd": "Sardinian", "srp": "Serbian",
    "ssw": "Swati", "sun": "Sundanese", "swe": "Swedish", "swh": "Swahili", "szl": "Silesian", "tam": "Tamil",
    "taq": "Tamasheq", "tat": "Tatar", "tel": "Telugu", "tgk": "Tajik", "tgl": "Tagalog", "tha": "Thai",
    "tir": "Tigrinya", "tpi": "Tok Pisin", "tsn": "Tswana", "tso": "Tsonga", "tuk": "Turkmen", "tum": "Tumbuka",
    "tur": "Turkish", "twi": "Twi", "tzm": "Central Atlas Tamazight", "uig": "Uyghur", "ukr": "Ukrainian",
    "umb": "Umbundu", "urd": "Urdu", "uzn": "Northern Uzbek", "vec": "Venetian", "vie": "Vietnamese",
    "war": "Waray", "wol": "Wolof", "xho": "Xhosa", "ydd": "Eastern Yiddish", "yor": "Yoruba", "yue": "Cantonese",
    "zho": "Chinese", "zsm": "Standard Malay", "zul": "Zulu",
}
NAMES_639_1 = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "ast": "Asturian", "az": "Azerbaijani", "ba": "Bashkir",
    "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "br": "Breton", "bs": "Bosnian", "ca": "Catalan",
    "ceb": "Cebuano", "cs": "Czech", "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "et": "Estonian", "fa": "Persian", "ff": "Fulah", "fi": "Finnish", "fr": "French",
    "fy": "Western Frisian", "ga": "Irish", "gd": "Scottish Gaelic", "gl": "Galician", "gu": "Gujarati",
    "ha": "Hausa", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "ht": "Haitian Creole", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "ig": "Igbo", "ilo": "Ilocano", "is": "Icelandic", "it": "Italian",
    "ja": "Japanese", "jv": "Javanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer", "kn": "Kannada",
    "ko": "Korean", "lb": "Luxembourgish", "lg": "Ganda", "ln": "Lingala", "lo": "Lao", "lt": "Lithuanian",
    "lv": "Latvian", "mg": "Malagasy", "mk": "Macedonian", "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi",
    "ms": "Malay", "my": "Burmese", "ne": "Nepali", "nl": "Dutch", "no": "Norwegian", "ns": "Northern Sotho",
    "oc": "Occitan", "or": "Odia", "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sd": "Sindhi", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian",
    "so": "Somali", "sq": "Albanian", "sr": "Serbian", "ss": "Swati", "su": "Sundanese", "sv": "Swedish",
    "sw": "Swahili", "ta": "Tamil", "th": "Thai", "tl": "Tagalog", "tn": "Tswana", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese", "wo": "Wolof", "xh": "Xhosa",
    "yi": "Yiddish", "yo": "Yoruba", "zh": "Chinese", "zu": "Zulu",
}
SCRIPTS = {"Arab": "Arabic", "Latn": "Latin", "Deva": "Devanagari", "Beng": "Bengali", "Tfng": "Tifinagh",
           "Hans": "Simplified", "Hant": "Traditional", "Cyrl": "Cyrillic"}


def language_name(code: str, codes: tuple[str, ...] = ()) -> str:
    """``"English"`` for ``eng_Latn`` or ``en``; the script is named when ``codes`` hold the language in several
    (``"Chinese (Simplified)"``); an unknown code is shown as it is."""
    base, _, script = code.partition("_")
    name = NAMES_639_3.get(base) if script else NAMES_639_1.get(code)
    if name is None:
        return code
    if script and sum(c.partition("_")[0] == base for c in codes) > 1:
        name += f" ({SCRIPTS.get(script, script)})"
    return name


def chosen(tr: Translator) -> tuple[str | None, str | None]:
    """The (source, target) codes picked for this model (None, None for a one-pair model)."""
    if not tr.languages:
        return None, None
    ss = st.session_state
    tok = tr.tokenizer
    return (ss.get(SRC_LANG) if ss.get(SRC_LANG) in tr.languages else getattr(tok, "default_src", None),
            ss.get(TGT_LANG) if ss.get(TGT_LANG) in tr.languages else getattr(tok, "default_tgt", None))


def settle(tr: Translator) -> None:
    """A multilingual model's (source, target) codes in the session, before the pickers are drawn (the page draws
    its picture first): a code this model lacks falls back to its default, with a notice when a link set it."""
    if not tr.languages:
        return
    ss = st.session_state
    src, tgt = chosen(tr)
    for key, code in ((SRC_LANG, src), (TGT_LANG, tgt)):
        if ss.get(key) not in (None, code):  # a code of another model (or from a link) falls back to the defaults
            params.link_value_dropped(key, f"this model has no language {ss.get(key)}")
    ss[SRC_LANG], ss[TGT_LANG] = src, tgt


def pickers(tr: Translator) -> None:
    """Two searchable selectboxes in the sidebar (source, target) for a multilingual model, as :func:`settle`
    left them; nothing otherwise."""
    if not tr.languages:
        return
    settle(tr)
    codes = sorted(tr.languages, key=lambda c: (language_name(c, tr.languages).lower(), c))
    label = {c: f"{language_name(c, tr.languages)} · {c}" for c in codes}
    with st.sidebar:
        st.subheader("Languages")
        st.selectbox("Source language", codes, key=SRC_LANG, format_func=label.get,
                     help=f"This model takes {len(codes)} languages: type to search by name.")
        st.selectbox("Target language", codes, key=TGT_LANG, format_func=label.get,
                     help="Its code is forced as the first token of the translation.")
