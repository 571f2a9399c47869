"""IMS-Toucan's articulatory phone features as B3 uses them: an IPA string (as the recogniser writes it) to one
62-d vector per phone, as ``ArticulatoryCombinedTextFrontend.string_to_tensor(..., input_phonemes=True)`` of the
VoicePrivacy 2024 recipe's vendored IMS-Toucan computes it (``Preprocessing/TextFrontend.py`` and
``Preprocessing/articulatory_features.py``, Apache-2.0).

A vector holds 13 modifier slots (stress, tones, length) and the phone's own features (category, place, tongue
position, openness, rounding, manner, voicing); ``~`` (pause), ``#`` (end of sentence), ``?``, ``!``, ``.`` and
`` `` (word boundary) are symbols of their own. Stress (``ˈ``) marks the phone after it; length and tone marks
modify the phone before them. The recipe drops a character it has no vector for (it prints "unknown phoneme");
:func:`unknown_phones` names them so that a caller can record them.

The aligner's CTC states are IDs over the same symbols (:data:`PHONE_TO_ID`, blank = 144): a vector's ID is that of
the table phone whose features (modifier slots left out) it has, which the table makes unique per phone.
"""
import numpy as np

FEATURE_NAMES = (
    # modifiers, set by the stress, length and tone marks around a phone
    "stressed", "very-high-tone", "high-tone", "mid-tone", "low-tone", "very-low-tone", "rising-tone",
    "falling-tone", "peaking-tone", "dipping-tone", "lengthened", "half-length", "shortened",
    # category
    "consonant", "vowel", "phoneme",
    # non-speech symbols
    "silence", "end of sentence", "questionmark", "exclamationmark", "fullstop", "word-boundary",
    # place
    "dental", "postalveolar", "velar", "palatal", "glottal", "uvular", "labiodental", "labial-velar", "alveolar",
    "bilabial", "alveolopalatal", "retroflex", "pharyngal", "epiglottal",
    # tongue position
    "central", "back", "front_central", "front", "central_back",
    # mouth openness
    "mid", "close-mid", "close", "open-mid", "close_close-mid", "open-mid_open", "open",
    # mouth shape
    "rounded", "unrounded",
    # manner
    "plosive", "nasal", "approximant", "trill", "flap", "fricative", "lateral-approximant", "implosive", "vibrant",
    "click",
    # voicing
    "unvoiced", "voiced",
)
FEATURE_INDEX = {name: index for index, name in enumerate(FEATURE_NAMES)}
VECTOR_SIZE = len(FEATURE_NAMES)  # 62
MODIFIER_SLOTS = 13
WORD_BOUNDARY = FEATURE_INDEX["word-boundary"]  # 21
PHONEME = FEATURE_INDEX["phoneme"]  # 15: energy is kept only for phones
VOICED = FEATURE_INDEX["voiced"]  # 61: pitch is kept only for voiced phones

# Each symbol's features; a phone (every entry past the word boundary) also has the feature "phoneme".
_SYMBOL_FEATURES = {
    '~': "silence",
    '#': "end of sentence",
    '?': "questionmark",
    '!': "exclamationmark",
    '.': "fullstop",
    ' ': "word-boundary",
    'ɜ': "vowel voiced central open-mid unrounded",
    'ə': "vowel voiced central mid unrounded",
    'a': "vowel voiced front open unrounded",
    'ð': "consonant voiced dental fricative",
    'ɛ': "vowel voiced front open-mid unrounded",
    'ɪ': "vowel voiced front_central close_close-mid unrounded",
    'ŋ': "consonant voiced velar nasal",
    'ɔ': "vowel voiced back open-mid rounded",
    'ɒ': "vowel voiced back open rounded",
    'ɾ': "consonant voiced alveolar flap",
    'ʃ': "consonant unvoiced postalveolar fricative",
    'θ': "consonant unvoiced dental fricative",
    'ʊ': "vowel voiced central_back close_close-mid unrounded",
    'ʌ': "vowel voiced back open-mid unrounded",
    'ʒ': "consonant voiced postalveolar fricative",
    'æ': "vowel voiced front open-mid_open unrounded",
    'b': "consonant voiced bilabial plosive",
    'ʔ': "consonant unvoiced glottal plosive",
    'd': "consonant voiced alveolar plosive",
    'e': "vowel voiced front close-mid unrounded",
    'f': "consonant unvoiced labiodental fricative",
    'ɡ': "consonant voiced velar plosive",
    'h': "consonant unvoiced glottal fricative",
    'i': "vowel voiced front close unrounded",
    'j': "consonant voiced palatal approximant",
    'k': "consonant unvoiced velar plosive",
    'l': "consonant voiced alveolar lateral-approximant",
    'm': "consonant voiced bilabial nasal",
    'n': "consonant voiced alveolar nasal",
    'ɳ': "consonant voiced retroflex nasal",
    'o': "vowel voiced back close-mid rounded",
    'p': "consonant unvoiced bilabial plosive",
    'ɹ': "consonant voiced alveolar approximant",
    'r': "consonant voiced alveolar trill",
    's': "consonant unvoiced alveolar fricative",
    't': "consonant unvoiced alveolar plosive",
    'u': "vowel voiced back close rounded",
    'v': "consonant voiced labiodental fricative",
    'w': "consonant voiced labial-velar approximant",
    'x': "consonant unvoiced velar fricative",
    'z': "consonant voiced alveolar fricative",
    'ʀ': "consonant voiced uvular trill",
    'ø': "vowel voiced front close-mid rounded",
    'ç': "consonant unvoiced palatal fricative",
    'ɐ': "vowel voiced central open unrounded",
    'œ': "vowel voiced front open-mid rounded",
    'y': "vowel voiced front close rounded",
    'ʏ': "vowel voiced front_central close_close-mid rounded",
    'ɑ': "vowel voiced back open unrounded",
    'c': "consonant unvoiced palatal plosive",
    'ɲ': "consonant voiced palatal nasal",
    'ɣ': "consonant voiced velar fricative",
    'ʎ': "consonant voiced palatal lateral-approximant",
    'β': "consonant voiced bilabial fricative",
    'ʝ': "consonant voiced palatal fricative",
    'ɟ': "consonant voiced palatal plosive",
    'q': "consonant unvoiced uvular plosive",
    'ɕ': "consonant unvoiced alveolopalatal fricative",
    'ɭ': "consonant voiced retroflex lateral-approximant",
    'ɵ': "vowel voiced central close-mid rounded",
    'ʑ': "consonant voiced alveolopalatal fricative",
    'ʋ': "consonant voiced labiodental approximant",
    'ʁ': "consonant voiced uvular fricative",
    'ɨ': "vowel voiced central close unrounded",
    'ʂ': "consonant unvoiced retroflex fricative",
    'ɓ': "consonant voiced bilabial implosive",
    'ʙ': "consonant voiced bilabial vibrant",
    'ɗ': "consonant voiced dental implosive",
    'ɖ': "consonant voiced retroflex plosive",
    'χ': "consonant unvoiced uvular fricative",
    'ʛ': "consonant voiced uvular implosive",
    'ʟ': "consonant voiced velar lateral-approximant",
    'ɽ': "consonant voiced retroflex flap",
    'ɢ': "consonant voiced uvular plosive",
    'ɠ': "consonant voiced velar implosive",
    'ǂ': "consonant unvoiced alveolopalatal click",
    'ɦ': "consonant voiced glottal fricative",
    'ǁ': "consonant unvoiced alveolar click",
    'ĩ': "vowel voiced front close unrounded nasal",
    'ʍ': "consonant unvoiced labial-velar fricative",
    'ʕ': "consonant voiced pharyngal fricative",
    'ɻ': "consonant unvoiced retroflex approximant",
    'ʄ': "consonant voiced palatal implosive",
    'ũ': "vowel voiced back close rounded nasal",
    'ɤ': "vowel voiced back close-mid unrounded",
    'ɶ': "vowel voiced front open rounded",
    'õ': "vowel voiced back close-mid rounded nasal",
    'ʡ': "consonant unvoiced epiglottal plosive",
    'ʈ': "consonant unvoiced retroflex plosive",
    'ʜ': "consonant unvoiced epiglottal fricative",
    'ɱ': "consonant voiced labiodental nasal",
    'ɯ': "vowel voiced back close unrounded",
    'ǀ': "consonant unvoiced dental click",
    'ɸ': "consonant unvoiced bilabial fricative",
    'ʘ': "consonant unvoiced bilabial click",
    'ʐ': "consonant voiced retroflex fricative",
    'ɰ': "consonant voiced velar approximant",
    'ɘ': "vowel voiced central close-mid unrounded",
    'ħ': "consonant unvoiced pharyngal fricative",
    'ɞ': "vowel voiced central open-mid rounded",
    'ʉ': "vowel voiced central close rounded",
    'ɴ': "consonant voiced uvular nasal",
    'ʢ': "consonant voiced epiglottal fricative",
    'ѵ': "consonant voiced labiodental flap",
    'ǃ': "consonant unvoiced postalveolar click",
}

# The aligner's CTC state IDs, in IMS-Toucan's order (``get_phone_to_id``); 144 is the CTC blank.
PHONE_TO_ID = {phone: index for index, phone in enumerate(
    "~#?!ǃ.ɜəaðɛɪŋɔɒɾʃθʊʌʒæbʔdefghijklmnɳopɡɹrstuvwxzʀøçɐœyʏɑcɲɣʎβʝɟqɕɭɵʑʋʁɨʂɓʙɗɖχʛʟɽɢɠǂɦǁĩʍʕɻʄũɤɶõʡʈʜɱɯǀɸʘʐɰɘħɞʉɴʢѵ")}
CTC_BLANK = 144
NUM_SYMBOLS = 145

_NON_PHONES = ("silence", "end of sentence", "questionmark", "exclamationmark", "fullstop", "word-boundary")
# Marks that modify the phone before them: the feature they set.
_MODIFIES_PREVIOUS = {
    "\u02d0": "lengthened", "\u02d1": "half-length", "\u0306": "shortened",
    "˥": "very-high-tone", "˦": "high-tone", "˧": "mid-tone", "˨": "low-tone", "˩": "very-low-tone",
    "⭧": "rising-tone", "⭨": "falling-tone", "⮁": "peaking-tone", "⮃": "dipping-tone",
}
PRIMARY_STRESS = "\u02c8"


def _vector(features: str) -> np.ndarray:
    vector = np.zeros(VECTOR_SIZE, dtype=np.float32)
    names = [features] if features in _NON_PHONES else ["phoneme", *features.split()]
    for name in names:
        vector[FEATURE_INDEX[name]] = 1.0
    return vector


PHONE_VECTORS = {phone: _vector(features) for phone, features in _SYMBOL_FEATURES.items()}


def normalise_phones(phones: str) -> str:
    """The two substitutions the front end makes on a given phone string (r-coloured schwa, barred i)."""
    return phones.replace("ɚ", "ə").replace("ᵻ", "ɨ")


def unknown_phones(phones: str) -> list[str]:
    """The characters of ``phones`` that have no vector and are no mark, in order (the recipe drops them)."""
    return [char for char in normalise_phones(phones)
            if char not in PHONE_VECTORS and char not in _MODIFIES_PREVIOUS and char != PRIMARY_STRESS]


def articulatory_vectors(phones: str) -> np.ndarray:
    """(N, 62) float32: one vector per known symbol of ``phones``, stress and length/tone marks folded in.

    A length or tone mark before any phone (or a stress mark before an unknown first symbol) is refused
    (ValueError); the recipe fails there with an IndexError, which its prosody extraction catches by leaving the
    utterance out."""
    vectors: list[np.ndarray] = []
    stressed = False
    for char in normalise_phones(phones):
        if char == PRIMARY_STRESS:
            stressed = True
        elif char in _MODIFIES_PREVIOUS:
            if not vectors:
                raise ValueError(f"the phone string {phones!r} starts with the mark {char!r}, which modifies "
                                 "the phone before it")
            vectors[-1][FEATURE_INDEX[_MODIFIES_PREVIOUS[char]]] = 1.0
        else:
            if char in PHONE_VECTORS:
                vectors.append(PHONE_VECTORS[char].copy())
            if stressed:  # as the recipe's: a dropped symbol passes the stress to the phone before it
                if not vectors:
                    raise ValueError(f"the phone string {phones!r} has a stress mark before an unknown symbol "
                                     "at its start")
                stressed = False
                vectors[-1][FEATURE_INDEX["stressed"]] = 1.0
    if not vectors:
        return np.zeros((0, VECTOR_SIZE), dtype=np.float32)
    return np.stack(vectors)


_ID_BY_FEATURES = {PHONE_VECTORS[phone][MODIFIER_SLOTS:].tobytes(): PHONE_TO_ID[phone]
                   for phone in PHONE_VECTORS if phone in PHONE_TO_ID}


def aligner_tokens(vectors: np.ndarray) -> np.ndarray:
    """The aligner's CTC state IDs (int64) of the vectors that are no word boundary (those are not aligned)."""
    kept = vectors[vectors[:, WORD_BOUNDARY] == 0]
    return np.array([_ID_BY_FEATURES[row[MODIFIER_SLOTS:].tobytes()] for row in kept], dtype=np.int64)
