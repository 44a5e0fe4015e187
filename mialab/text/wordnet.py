"""Offline WordNet 3.0 for the default paraphraser: Debian's ``wordnet-base`` files read by NLTK.

NLTK's reader expects its own corpus layout: a ``lexnames`` file (the Debian package omits it;
its content is the fixed table of WordNet 3.0 lexicographer files, ``lexnames(5WN)``), and
files inside a directory NLTK trusts. So the data files are copied once into a cache directory
(:func:`cache_dir`: ``$MIALAB_WORDNET_CACHE``, else ``$XDG_CACHE_HOME/mialab/wordnet-3.0`` or
``~/.cache/...``) next to a written ``lexnames``.
Install the data with ``apt-get install wordnet-base`` (or point ``source`` at any WNDB folder).
"""

from __future__ import annotations

import functools
import shutil
import warnings
from pathlib import Path

from mialab.core.io import atomic_directory
from mialab.core.paths import user_cache

DEBIAN_WORDNET = "/usr/share/wordnet"
WNDB_FILES = tuple(f"{kind}.{pos}" for pos in ("adj", "adv", "noun", "verb") for kind in ("data", "index")) + (
    "adj.exc", "adv.exc", "noun.exc", "verb.exc", "cntlist.rev")
# WordNet 3.0 lexicographer files by number (lexnames(5WN)); the digit is the syntactic category.
LEXNAMES = (
    ("adj.all", 3), ("adj.pert", 3), ("adv.all", 4), ("noun.Tops", 1), ("noun.act", 1), ("noun.animal", 1),
    ("noun.artifact", 1), ("noun.attribute", 1), ("noun.body", 1), ("noun.cognition", 1),
    ("noun.communication", 1), ("noun.event", 1), ("noun.feeling", 1), ("noun.food", 1), ("noun.group", 1),
    ("noun.location", 1), ("noun.motive", 1), ("noun.object", 1), ("noun.person", 1), ("noun.phenomenon", 1),
    ("noun.plant", 1), ("noun.possession", 1), ("noun.process", 1), ("noun.quantity", 1), ("noun.relation", 1),
    ("noun.shape", 1), ("noun.state", 1), ("noun.substance", 1), ("noun.time", 1), ("verb.body", 2),
    ("verb.change", 2), ("verb.cognition", 2), ("verb.communication", 2), ("verb.competition", 2),
    ("verb.consumption", 2), ("verb.contact", 2), ("verb.creation", 2), ("verb.emotion", 2), ("verb.motion", 2),
    ("verb.perception", 2), ("verb.possession", 2), ("verb.social", 2), ("verb.stative", 2), ("verb.weather", 2),
    ("adj.ppl", 3),
)


def cache_dir() -> Path:
    """Where the NLTK-readable copy lives: ``$MIALAB_WORDNET_CACHE`` when set, else
    ``$XDG_CACHE_HOME/mialab/wordnet-3.0`` (``~/.cache/mialab/wordnet-3.0``); docs/files.md."""
    return user_cache("wordnet-3.0", "MIALAB_WORDNET_CACHE")


def prepare_corpus(source: str = DEBIAN_WORDNET) -> Path:
    """Copy the WNDB files of ``source`` into :func:`cache_dir` with a ``lexnames`` file (once)."""
    root = cache_dir()
    if (root / "lexnames").is_file():
        return root
    missing = [f for f in WNDB_FILES if not (Path(source) / f).is_file()]
    if missing:
        raise FileNotFoundError(f"WordNet database files {missing} not found in {source}; install the Debian "
                                "package wordnet-base (apt-get install wordnet-base)")
    with atomic_directory(root) as tmp:
        for name in WNDB_FILES:
            shutil.copyfile(Path(source) / name, tmp / name)
        (tmp / "lexnames").write_text("".join(f"{i:02d}\t{n}\t{c}\n" for i, (n, c) in enumerate(LEXNAMES)))
    return root


@functools.lru_cache(maxsize=2)
def load_wordnet(source: str = DEBIAN_WORDNET):
    """An NLTK ``WordNetCorpusReader`` over the Debian WordNet 3.0 files (loaded once)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _StandaloneWordNet(WordNetCorpusReader):
        """No mapping to NLTK's downloadable 'wordnet' corpus: that needs index.sense, which
        Debian does not ship, and only serves the multilingual (OMW) functions."""

        def map_wn(self, version="wordnet"):
            return None

    root = prepare_corpus(source)
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        return _StandaloneWordNet(str(root), None)


@functools.lru_cache(maxsize=65536)
def synonyms(word: str, min_count: int = 0, source: str = DEBIAN_WORDNET) -> tuple[str, ...]:
    """Synonyms of a lower-case base-form word in one sense, sorted.

    A word that may be an inflected form of another lemma ("taken", "points") gets none. The
    sense is the synset where ``word`` itself is most frequent in the SemCor counts (ties:
    WordNet's own order, most common first); synonyms are its other lemmas counted at least
    ``min_count`` times in that sense (drops rare and archaic ones), lower-case (no proper
    nouns), of 3+ letters, not containing ``word`` ("numbers game"), underscores as spaces.
    The choice is sense-blind (no part-of-speech tagging offline), so some substitutions are odd.
    """
    wn = load_wordnet(source)
    if any(wn.morphy(word, pos) not in (None, word) for pos in "nvar"):
        return ()
    best, best_count = None, -1
    for synset in wn.synsets(word):
        for lemma in synset.lemmas():
            if lemma.name() == word and lemma.count() > best_count:
                best, best_count = synset, lemma.count()
    if best is None:
        return ()
    names = {lemma.name().replace("_", " ") for lemma in best.lemmas() if lemma.count() >= min_count}
    return tuple(sorted(n for n in names if len(n) >= 3 and n.islower() and word not in n.split()
                        and n.replace(" ", "").replace("-", "").isalpha()))
