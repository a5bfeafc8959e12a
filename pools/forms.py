"""The team lead's quota request form. Its rules are the service's (`pools.services.request_quota_change`); errors
the service raises come back beside the field they name, and what was typed stays in the form."""

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.forms import ServiceErrorsMixin
from portal.models import Team

from .choices import Lending
from .models import Pool, Quota


class QuotaRequestForm(ServiceErrorsMixin, forms.Form):
    pool = forms.ModelChoiceField(queryset=Pool.objects.none(), to_field_name="slug", label=_("Pool"))
    max_gpus = forms.IntegerField(
        label=_("GPUs at once"),
        min_value=0,
        max_value=1_000_000,
        help_text=_("The quota you ask for: how many GPUs of the pool the team may use at once."),
    )
    reason = forms.CharField(
        label=_("Why"),
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("What the GPUs are for and for how long; the platform admins decide on it."),
        error_messages={"required": _("Say why the team needs this change: the admins decide on it.")},
    )

    def __init__(self, *args, team: Team, user, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        quotas = dict(Quota.objects.filter(team=team).values_list("pool_id", "max_gpus"))
        pool_field = self.fields["pool"]
        pool_field.queryset = Pool.objects.visible_to(user).order_by("name")
        pool_field.label_from_instance = lambda pool: (
            _("%(pool)s (quota now %(gpus)d GPUs)")
            % {
                "pool": pool.name,
                "gpus": quotas.get(pool.pk, 0),
            }
        )


class LendingForm(ServiceErrorsMixin, forms.Form):
    """A reservation's lending setting, on the team page (one form per reservation, its fields prefixed by the
    reservation's id). The rules are `pools.services.set_lending`'s."""

    lending = forms.ChoiceField(label=_("Lending"), choices=Lending.choices)
    protected_gpus = forms.IntegerField(
        label=_("Protected GPUs"),
        required=False,
        min_value=0,
        max_value=1_000_000,
        help_text=_("With “keep some protected”: GPUs never lent, whatever the team's own jobs use."),
    )

    def __init__(self, *args, reservation, **kwargs):
        kwargs.setdefault("label_suffix", "")
        kwargs.setdefault("prefix", f"r{reservation.pk}")
        kwargs.setdefault(
            "initial", {"lending": reservation.lending, "protected_gpus": reservation.protected_gpus or None}
        )
        super().__init__(*args, **kwargs)
        self.reservation = reservation
