"""What the portal's forms share, and the form of a user's own preferences."""

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from .choices import JobMail


class ServiceErrorsMixin:
    """For a form whose rules are a service's: the service's ValidationError goes beside the fields it names (the
    rest above the form), and what was typed stays."""

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, messages in error.message_dict.items():
            self.add_error(field if field in self.fields else None, messages)


class PreferencesForm(ServiceErrorsMixin, forms.Form):
    """A user's language and the e-mails the jobs they submit ask for by default (`portal.preferences`)."""

    language = forms.ChoiceField(label=_("Language"))
    notify_default = forms.MultipleChoiceField(
        label=_("E-mail me about my jobs"),
        choices=JobMail.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "What a job you submit asks for unless you choose otherwise on the form; each job's page can change it."
        ),
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["language"].choices = settings.LANGUAGES
