"""How far annotators agree on the classes of the same items.

Ratings are `{item: {annotator: category}}`; an item counts where two annotators or more rated
it. The measures:
- percent agreement: over the items, the share of pairs of annotators giving the same category
  (for two annotators, the share of items they agree on);
- per class, specific agreement: of the pairs in which one annotator chose the class, the share
  in which the other did too, Σᵢ nᵢⱼ(nᵢⱼ−1) / Σᵢ nᵢⱼ(nᵢ−1) (for two, 2·both / (first + second));
- Cohen's kappa for two annotators (scikit-learn's `cohen_kappa_score`, over the items both
  rated) and Fleiss' kappa for more: agreement beyond what the categories' overall shares give
  by chance, (P̄ − Pₑ) / (1 − Pₑ). Fleiss' P̄ averages each item's pairs, so items rated by
  different numbers of annotators count alike. A kappa is None where chance agreement is
  certain (every rating in one category);
- each annotator's agreement with the majority of the *others* on the items they rated (an item
  whose others tie, or that nobody else rated, does not count): the annotator's own vote would
  otherwise lift their score, and with two annotators there is no majority at all.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from mlyard.annotation.model import Annotations

Ratings = Mapping[str, Mapping[str, str]]
INSTALL = "pip install scikit-learn (or 'mlyard[examples]')"


class AgreementError(ValueError):
    """Ratings a measure cannot take, or a missing library: one line to show."""


def ratings_from(by_annotator: Mapping[str, Annotations]) -> dict[str, dict[str, str]]:
    """`{item: {annotator: category}}` from each annotator's annotations: an item's category is
    its label, its several labels joined by `;` as one set, or its text; boxes are not rated."""
    ratings: dict[str, dict[str, str]] = {}
    for annotator, theirs in by_annotator.items():
        if theirs.kind == "boxes":
            raise AgreementError("agreement is measured on classes and texts, not on boxes")
        for path, item in theirs.items.items():
            category = ";".join(sorted(item.labels)) if item.labels else item.text_label
            if category:
                ratings.setdefault(path, {})[annotator] = category
    return ratings


def _counts(ratings: Ratings) -> list[Counter[str]]:
    """Each item's count of ratings per category, for the items that two annotators or more rated."""
    return [Counter(by_annotator.values()) for by_annotator in ratings.values() if len(by_annotator) >= 2]


def _pairs(count: int) -> int:
    return count * (count - 1)


def percent_agreement(ratings: Ratings) -> float | None:
    """The mean share of agreeing pairs of annotators per item; None where no item has two."""
    items = _counts(ratings)
    if not items:
        return None
    return sum(sum(_pairs(n) for n in item.values()) / _pairs(item.total()) for item in items) / len(items)


def class_agreement(ratings: Ratings) -> dict[str, float]:
    """Specific agreement per category (see above), most agreed first."""
    agreeing: Counter[str] = Counter()
    possible: Counter[str] = Counter()
    for item in _counts(ratings):
        for category, n in item.items():
            agreeing[category] += _pairs(n)
            possible[category] += n * (item.total() - 1)
    shares = {category: agreeing[category] / possible[category] for category in possible}
    return dict(sorted(shares.items(), key=lambda pair: (-pair[1], pair[0])))


def fleiss_kappa(ratings: Ratings) -> float | None:
    """Fleiss' kappa over the items that two annotators or more rated (Fleiss, 1971)."""
    items = _counts(ratings)
    if not items:
        return None
    observed = sum(sum(_pairs(n) for n in item.values()) / _pairs(item.total()) for item in items) / len(items)
    totals: Counter[str] = Counter()
    for item in items:
        totals.update(item)
    chance = sum((n / totals.total()) ** 2 for n in totals.values())
    if math.isclose(chance, 1.0):
        return None
    return (observed - chance) / (1 - chance)


def cohen_kappa(ratings: Ratings) -> float | None:
    """Cohen's kappa of the two annotators over the items both rated; None where there is none,
    or every rating is one category."""
    annotators = sorted({annotator for by_annotator in ratings.values() for annotator in by_annotator})
    if len(annotators) != 2:
        raise AgreementError(f"Cohen's kappa is for two annotators, not {len(annotators)}: Fleiss' is for more")
    first, second = annotators
    pairs = [(by_annotator[first], by_annotator[second]) for by_annotator in ratings.values()
             if first in by_annotator and second in by_annotator]
    if len({category for pair in pairs for category in pair}) < 2:
        return None  # no item, or one category throughout: chance agreement is certain
    score = _cohen_kappa_score()([one for one, _ in pairs], [other for _, other in pairs],
                                 replace_undefined_by=math.nan)
    return None if math.isnan(score) else float(score)


def _cohen_kappa_score() -> Any:
    # scikit-learn is heavy and optional (the `examples` extra): imported only when asked for.
    try:
        from sklearn.metrics import cohen_kappa_score
    except ImportError as error:
        raise AgreementError(f"Cohen's kappa needs scikit-learn ({error}): {INSTALL}") from error
    return cohen_kappa_score


def majority_agreement(ratings: Ratings) -> dict[str, float | None]:
    """`{annotator: share of their ratings that match the others' strict majority}` (see above);
    None for an annotator never compared."""
    agreed: Counter[str] = Counter()
    compared: Counter[str] = Counter()
    annotators: set[str] = set()
    for by_annotator in ratings.values():
        annotators |= set(by_annotator)
        for annotator, category in by_annotator.items():
            others = Counter(value for name, value in by_annotator.items() if name != annotator).most_common(2)
            if not others or (len(others) == 2 and others[0][1] == others[1][1]):
                continue
            compared[annotator] += 1
            agreed[annotator] += others[0][0] == category
    return {annotator: agreed[annotator] / compared[annotator] if compared[annotator] else None
            for annotator in sorted(annotators)}


def report(ratings: Ratings) -> dict[str, Any]:
    """All the measures at once: Cohen's kappa for two annotators, Fleiss' for more."""
    annotators = sorted({annotator for by_annotator in ratings.values() for annotator in by_annotator})
    measure = "cohen" if len(annotators) == 2 else "fleiss" if len(annotators) > 2 else None
    kappa = cohen_kappa(ratings) if measure == "cohen" else fleiss_kappa(ratings) if measure else None
    return {"annotators": annotators, "items": len(_counts(ratings)), "percent_agreement": percent_agreement(ratings),
            "class_agreement": class_agreement(ratings), "kappa_measure": measure, "kappa": kappa,
            "majority_agreement": majority_agreement(ratings)}
