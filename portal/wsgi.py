import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
django.setup(set_prefix=False)

from portal.token_lane import PortalApplication  # noqa: E402 - after Django's setup, as get_wsgi_application does

# What get_wsgi_application() gives, with API requests that carry a token taking a shorter middleware chain.
application = PortalApplication()
