"""What an error report (Django's 500 page under DEBUG, the error e-mails and logs) may show of a request.

Django's SafeExceptionReporterFilter hides what views mark as sensitive (`sensitive_post_parameters`,
`sensitive_variables`) only while DEBUG is off. `make dev` runs with DEBUG on, and a secret typed into the portal must
not appear on anyone's screen either: this filter hides the marked parameters and variables always.
"""

from django.views.debug import SafeExceptionReporterFilter


class AlwaysSafeExceptionReporterFilter(SafeExceptionReporterFilter):
    def is_active(self, request) -> bool:
        return True
