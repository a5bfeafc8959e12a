# The one image of every Reservoir process: web (gunicorn), Celery worker and beat, the outbox dispatcher, the sync
# and the migrations. The Helm chart (deploy/helm/reservoir) and docker-compose.yml run it with the commands and
# variables `make dev` uses (scripts/dev.sh). It runs as a non-root user (uid 10001) on a read-only root filesystem:
# only /tmp is written. Not built on the development machines, which have no Docker engine;
# tests/deploy/test_image_and_settings.py checks what can be checked without one.
FROM node:20-bookworm-slim AS frontend
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=portal.settings.prod HOME=/tmp
RUN apt-get update && apt-get install -y --no-install-recommends gettext && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 reservoir \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin reservoir
WORKDIR /app
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
COPY --from=frontend /app/node_modules ./node_modules
# Translations compiled and static files collected at build time (the root filesystem is read-only at run time);
# the files stay root's, readable by the portal's user.
RUN msgfmt --check -o locale/zh_Hans/LC_MESSAGES/django.mo locale/zh_Hans/LC_MESSAGES/django.po \
 && DJANGO_SECRET_KEY=build-only python manage.py collectstatic --noinput \
 && chmod -R a+rX /app
USER 10001:10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--worker-tmp-dir", "/tmp", "--access-logfile", "-", "--config", "portal/gunicorn_config.py"]
