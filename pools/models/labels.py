"""What a pool's node selector and taints may hold: Kubernetes label keys and values, within Kueue's limits for a
resource flavor."""

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _

from cluster.kueue import MAX_FLAVOR_NODE_LABELS, MAX_FLAVOR_TOLERATIONS

from ..choices import TaintEffect

# Kubernetes label keys and values (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/), to the
# end of the text (\Z: `$` would let a trailing newline through).
_LABEL_KEY_FORM = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"
)


def label_key(key: str) -> None:
    """A Kubernetes label (or taint) key: an optional DNS subdomain prefix of at most 253 characters and `/`, then a
    name of at most 63 (IsQualifiedName)."""
    if not isinstance(key, str):
        raise ValidationError("label key is not text", code="invalid")
    _LABEL_KEY_FORM(key)
    prefix, slash, _name = key.rpartition("/")
    if slash and len(prefix) > 253:
        raise ValidationError("label key prefix over 253 characters", code="invalid")


LABEL_VALUE = RegexValidator(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")


def validate_selector(value) -> None:
    if not isinstance(value, dict) or not value:
        raise ValidationError(_("A pool needs at least one node label to select its nodes, e.g. node-role=training."))
    if len(value) > MAX_FLAVOR_NODE_LABELS:
        raise ValidationError(
            _("A pool is selected by at most %(max)d node labels (Kueue's limit for a resource flavor).")
            % {"max": MAX_FLAVOR_NODE_LABELS}
        )
    for key, label_value in value.items():
        if not isinstance(key, str) or not isinstance(label_value, str):
            raise ValidationError(_("Selector labels are text: %(key)s.") % {"key": key})
        try:
            label_key(key)
        except ValidationError:
            raise ValidationError(_("'%(key)s' is not a valid Kubernetes label key.") % {"key": key}) from None
        try:
            LABEL_VALUE(label_value)
        except ValidationError:
            raise ValidationError(
                _("'%(value)s' is not a valid Kubernetes label value.") % {"value": label_value}
            ) from None


def validate_taints(value) -> None:
    if not isinstance(value, list):
        raise ValidationError(_("Taints are a list of {key, value, effect}."))
    if len(value) > MAX_FLAVOR_TOLERATIONS:
        raise ValidationError(
            _("A pool has at most %(max)d taints (Kueue's limit for a resource flavor's tolerations).")
            % {"max": MAX_FLAVOR_TOLERATIONS}
        )
    seen = set()
    for taint in value:
        if not isinstance(taint, dict) or not taint.get("key"):
            raise ValidationError(_("Each taint needs a key, e.g. {'key': 'workload', 'value': 'training'}."))
        # the cluster takes only text (a number would be written as one, and refused with every toleration naming it)
        if not isinstance(taint["key"], str) or not isinstance(taint.get("value", ""), str):
            raise ValidationError(_("A taint's key and value are text: %(key)s.") % {"key": taint["key"]})
        effect = taint.get("effect", TaintEffect.NO_SCHEDULE)
        if effect not in TaintEffect.values:
            raise ValidationError(
                _("Taint effect must be one of %(effects)s.") % {"effects": ", ".join(TaintEffect.values)}
            )
        try:
            label_key(taint["key"])
            LABEL_VALUE(taint.get("value", ""))
        except ValidationError:
            raise ValidationError(_("Taint %(key)s is not a valid key/value.") % {"key": taint["key"]}) from None
        if (taint["key"], effect) in seen:  # a node carries one taint per key and effect: the apiserver refuses two
            raise ValidationError(
                _("Two taints have the key %(key)s and the effect %(effect)s: a node carries only one of them.")
                % {"key": taint["key"], "effect": effect}
            )
        seen.add((taint["key"], effect))
