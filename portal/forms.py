"""What the portal's forms share."""

from django.core.exceptions import ValidationError


class ServiceErrorsMixin:
    """For a form whose rules are a service's: the service's ValidationError goes beside the fields it names (the
    rest above the form), and what was typed stays."""

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, messages in error.message_dict.items():
            self.add_error(field if field in self.fields else None, messages)
