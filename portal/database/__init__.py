"""The portal's database backend: Django's PostgreSQL backend with a cheaper health check (base.py)."""
