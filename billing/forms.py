from django import forms
from django.utils.formats import date_format
from django.utils.translation import gettext_lazy as _

from .periods import format_month, parse_month


class MonthForm(forms.Form):
    """The month picker: one of the months offered (newest first); anything else falls back to the newest."""

    month = forms.ChoiceField(label=_("Month"))

    def __init__(self, *args, months, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["month"].choices = [
            (format_month(month), date_format(month, "YEAR_MONTH_FORMAT")) for month in months
        ]
        self.months = months

    def chosen(self):
        if self.is_valid():
            return parse_month(self.cleaned_data["month"])
        return self.months[0]


class BudgetForm(forms.Form):
    """A team's monthly cap on the variable part; empty removes the budget."""

    monthly_cap = forms.DecimalField(
        label=_("Monthly cap on the variable part"), required=False, min_value=0, max_digits=14, decimal_places=2
    )
