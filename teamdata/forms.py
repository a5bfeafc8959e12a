"""The team page's forms for volumes and secrets. Their rules are the services' (`teamdata.services`); a service's
errors come back beside the field they name, and what was typed stays — except secret values, which are never
sent back to the browser, not even with an error."""

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from jobs.specs import SECRET_KEY
from portal.forms import ServiceErrorsMixin

from .choices import AccessMode, SecretKind, VolumeSource
from .models import MAX_VOLUME_GIB


class VolumeForm(ServiceErrorsMixin, forms.Form):
    name = forms.CharField(
        label=_("Claim name"),
        max_length=63,
        help_text=_("The PersistentVolumeClaim's name in the team namespace, e.g. datasets."),
    )
    source = forms.ChoiceField(
        label=_("Volume"), choices=VolumeSource.choices, initial=VolumeSource.CREATED, widget=forms.RadioSelect
    )
    size_gib = forms.IntegerField(
        label=_("Size (GiB)"), required=False, min_value=1, max_value=MAX_VOLUME_GIB, help_text=_("For a new claim.")
    )
    access_mode = forms.ChoiceField(
        label=_("Access mode"), choices=AccessMode.choices, initial=AccessMode.READ_WRITE_ONCE, required=False
    )
    storage_class = forms.CharField(
        label=_("Storage class"),
        required=False,
        max_length=253,
        help_text=_("For a new claim; empty: the cluster's default class."),
    )
    read_only_for_researchers = forms.BooleanField(
        label=_("Read-only for researchers"),
        required=False,
        help_text=_("Researchers' jobs mount it read-only, whatever they ask; leads and admins may still write."),
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("source") == VolumeSource.CREATED and not cleaned.get("size_gib"):
            self.add_error("size_gib", _("Say how large the new claim is, in GiB."))
        return cleaned


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValidationError(_("Line %(n)d: write KEY=value."), params={"n": number}, code="pairs")
        if not SECRET_KEY.match(key.strip()):  # the line is named, never echoed: what precedes '=' may be a value
            raise ValidationError(
                _(
                    "Line %(n)d: a key may hold only letters, digits, '-', '_' and '.', and may not be '.' or start "
                    "with '..' (write KEY=value)."
                ),
                params={"n": number},
                code="pairs",
            )
        pairs[key.strip()] = value
    return pairs


class SecretForm(ServiceErrorsMixin, forms.Form):
    """Image pull credentials (registry, user name, password) or a named secret (KEY=value lines). The value fields
    never render what was typed."""

    name = forms.CharField(
        label=_("Secret name"), max_length=63, help_text=_("The Secret's name in the team namespace, e.g. hf-token.")
    )
    kind = forms.ChoiceField(
        label=_("Kind"), choices=SecretKind.choices, initial=SecretKind.OPAQUE, widget=forms.RadioSelect
    )
    registry = forms.CharField(
        label=_("Registry"), required=False, max_length=253, help_text=_("e.g. registry.example.com")
    )
    username = forms.CharField(label=_("User name"), required=False, max_length=253)
    password = forms.CharField(
        label=_("Password or token"), required=False, max_length=4096, widget=forms.PasswordInput(render_value=False)
    )
    values = forms.CharField(
        label=_("Values"),
        required=False,
        max_length=512 * 1024,
        widget=forms.Textarea(attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false"}),
        help_text=_("One KEY=value per line. Shown never again: the values live only in the cluster."),
    )

    def __init__(self, *args, rotating=None, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        if rotating is not None:
            self.fields["name"].disabled = True
            self.fields["kind"].disabled = True
            self.initial.update({"name": rotating.name, "kind": rotating.kind, "registry": rotating.registry})

    def clean_values(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["values"])

    def blank_values(self) -> None:
        """Forget the typed values before the form is shown again (after an error)."""
        if self.is_bound:
            data = self.data.copy()
            data["values"] = ""
            data["password"] = ""
            self.data = data
