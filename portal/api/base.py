"""What every app's API shares: role permissions, pagination, whole-number fields, and model rules as field errors.

Scope and role are two questions. What a caller may not see is filtered out by the viewset's `visible_to(user)`
queryset, so it answers 404 like something that does not exist. What a caller sees but their role may not change
answers 403. Admin-only resources (tokens, the audit log) do not exist for anyone else: 404.
"""

import copy
import functools

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_lazy as _
from django_filters.filters import AllValuesFilter, AllValuesMultipleFilter, QuerySetRequestMixin
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.utils import translate_validation
from rest_framework import exceptions, filters, pagination, permissions, serializers
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import exception_handler as drf_exception_handler

from portal import outage


def is_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_admin)


class AdminWrites(permissions.BasePermission):
    """Everyone signed in reads what their queryset shows; only platform admins write.

    A write to one object is judged after the object was looked up in the caller's queryset, so an object outside
    the caller's scope answers 404 before its role is considered."""

    message = _("Only platform admins can change this.")

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        lookup = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
        if request.method in permissions.SAFE_METHODS or lookup in view.kwargs:
            return True
        return request.user.is_admin

    def has_object_permission(self, request, view, obj) -> bool:
        return request.method in permissions.SAFE_METHODS or request.user.is_admin


class AdminOnly(permissions.BasePermission):
    """Resources only platform admins know of: for anyone else signed in they do not exist (404)."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if not request.user.is_admin:
            raise exceptions.NotFound()
        return True


# The largest OFFSET PostgreSQL takes (a bigint).
MAX_OFFSET = 2**63 - 1


class Pagination(pagination.PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def requested_page(self, request) -> tuple[int, int] | None:
        """The page number and size the request asks for, for a view that reads its page and its count in one query
        (`known_page` answers it): None for the last page (`?page=last`, which needs the count first); a page number
        that is not a whole number of at least 1 is a 404, as `paginate_queryset` answers it."""
        self.request = request
        number = request.query_params.get(self.page_query_param) or 1
        if number in self.last_page_strings:
            return None
        try:
            number = int(number)
        except (TypeError, ValueError):
            number = 0
        size = self.get_page_size(request)
        # A page past what an OFFSET can say (a bigint) holds nothing: answered as past the last page, not sent.
        if number < 1 or (number - 1) * size > MAX_OFFSET:
            raise exceptions.NotFound(self.invalid_page_message)
        return number, size

    def known_page(self, *, number: int, size: int, count: int | None, results: list) -> Response:
        """The answer of `get_paginated_response` for page `number` of `size` rows whose filtered rows number
        `count`, known from the page's own query (None when it read no row: it does not say how many there are).
        Past the last page is a 404, as for `paginate_queryset`; an empty first page is an empty list."""
        count = count or 0
        pages = max(1, -(-count // size))
        if number > pages:
            raise exceptions.NotFound(self.invalid_page_message)
        url = self.request.build_absolute_uri()
        following = replace_query_param(url, self.page_query_param, number + 1) if number < pages else None
        if number == 1:
            previous = None
        elif number == 2:
            previous = remove_query_param(url, self.page_query_param)
        else:
            previous = replace_query_param(url, self.page_query_param, number - 1)
        return Response({"count": count, "next": following, "previous": previous, "results": results})


class WholeNumberField(serializers.IntegerField):
    """An integer that says so clearly when it is negative, fractional, a boolean or text."""

    def __init__(self, *, label_text: str = "The value", **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", 1_000_000)
        # The validators built in IntegerField.__init__ format these messages, so they are given up front.
        kwargs["error_messages"] = {
            "invalid": _("%s must be a whole number, not a fraction or text.") % label_text,
            "min_value": _("%s cannot be below {min_value}.") % label_text,
            "max_value": _("%s cannot be above {max_value}.") % label_text,
            **kwargs.get("error_messages", {}),
        }
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or (isinstance(data, float) and not data.is_integer()):
            self.fail("invalid")
        if isinstance(data, str) and "." in data:
            self.fail("invalid")
        return super().to_internal_value(data)


class GpuField(WholeNumberField):
    def __init__(self, **kwargs):
        super().__init__(label_text=str(_("GPUs")), **kwargs)


def refuse_fixed_fields(*, data, instance, messages: dict[str, str], serializer_class) -> None:
    """A PUT or PATCH of `instance` whose body names a field that never changes once the row exists (`messages`: its
    name -> why) with a value other than the stored one is refused with a field error, as a job's PATCH is ("Only
    notify can be changed on a job."): never dropped while the rest is applied to the row in the URL. The value is read
    by the field of `serializer_class` (the one that writes it on creation) and compared with the stored one, so a GET
    body PUT back works."""
    named = [name for name in messages if isinstance(data, dict) and name in data]
    if not named:
        return
    fields = serializer_class().fields
    errors = {name: [messages[name]] for name in named if _differs(fields[name], data[name], instance)}
    if errors:
        raise serializers.ValidationError(errors)


def _differs(field: serializers.Field, sent, instance) -> bool:
    try:
        # as the field reads it ("3.5" and 3.50, or the same moment in two offsets, are one value)
        return field.to_internal_value(sent) != field.get_attribute(instance)
    except (serializers.ValidationError, DjangoValidationError, TypeError, ValueError):
        return True  # an unknown team, a malformed value: not the stored one


def django_errors_as_drf(error: DjangoValidationError) -> exceptions.ValidationError:
    """A model or service ValidationError as DRF field errors ({"field": [messages]}, else non_field_errors)."""
    if hasattr(error, "error_dict"):
        detail = {
            ("non_field_errors" if field == "__all__" else field): messages
            for field, messages in error.message_dict.items()
        }
    else:
        detail = {"non_field_errors": error.messages}
    return exceptions.ValidationError(detail)


class DatabaseUnavailable(exceptions.APIException):
    """PostgreSQL cannot be reached: 503 with Retry-After (DRF's handler writes the header from `wait`)."""

    status_code = 503
    default_code = "database_unavailable"

    def __init__(self):
        super().__init__(outage.MESSAGE)
        self.wait = outage.retry_after()


def exception_handler(exc, context):
    """DRF's handler, plus: a Django ValidationError from a service or model answers 400 with field errors, and an
    unreachable database answers 503 with Retry-After."""
    if isinstance(exc, DjangoValidationError):
        exc = django_errors_as_drf(exc)
    elif outage.is_database_unavailable(exc):
        exc = DatabaseUnavailable()
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, DatabaseUnavailable):
        response.data["retry_after"] = exc.wait
    return response


class FullCleanMixin:
    """Serializers of models run the model's own rules (clean() and field validators) during validation."""

    full_clean_exclude: tuple[str, ...] = ()

    def validate(self, attrs):
        attrs = super().validate(attrs)
        model = self.Meta.model
        fields = model._meta.concrete_fields
        if self.instance is not None:
            instance = model(**{f.attname: getattr(self.instance, f.attname) for f in fields})
            instance._state.adding = self.instance._state.adding
        else:
            instance = model()
        for name, value in attrs.items():
            if name in {f.name for f in fields}:
                setattr(instance, name, value)
        try:
            instance.full_clean(exclude=list(self.full_clean_exclude), validate_unique=True)
        except DjangoValidationError as error:
            raise django_errors_as_drf(error) from None
        return attrs


class FilterBackend(DjangoFilterBackend):
    """django-filter's backend, refusing query strings with NUL characters (PostgreSQL cannot compare them) as a
    400 instead of failing in the database, and building only the filters the query string names.

    A filter left out of the query string filters nothing, and django-filter would still copy it, build its form
    field and validate an empty value on every request (about a sixth of a jobs-list request's CPU): each request
    gets the FilterSet with only its named filters (a subclass made once per set of names), with the same fields,
    checks and messages. The browsable API's filter form (`to_html`) still shows every filter."""

    def filter_queryset(self, request, queryset, view):
        filterset = self.valid_filterset(request, queryset, view)
        return queryset if filterset is None else filterset.qs

    def valid_filterset(self, request, queryset, view):
        """The view's FilterSet bound to the request's query string and validated (a 400 when it is not valid), or
        None when the view has none: `filter_queryset` takes its `qs`; a view that reads its page with SQL of its
        own takes its `form.cleaned_data` (jobs/api/listing.py)."""
        for key, values in request.query_params.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                raise exceptions.ValidationError({key.replace("\x00", ""): [_("NUL characters are not allowed.")]})
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None:
            return None
        given = named_filters(filterset_class, request.query_params.keys())
        filterset = given(**self.get_filterset_kwargs(request, queryset, view))
        if not filterset.is_valid() and self.raise_exception:
            raise translate_validation(filterset.errors)
        return filterset


class OrderingFilter(filters.OrderingFilter):
    """DRF's `?ordering=` (else the view's `ordering`), the primary key breaking ties, newest first, unless a unique
    field already orders the rows, as the jobs list's SQL does (jobs/api/listing.py `ordered`).

    PostgreSQL keeps no order among rows that tie (`?ordering=max_gpus` over quotas of 8 GPUs each), and each page
    is its own LIMIT/OFFSET query: without a unique last term, a walk through the pages lists some rows twice and
    others never."""

    def get_ordering(self, request, queryset, view):
        ordering = super().get_ordering(request, queryset, view)
        return ordered_uniquely(ordering, queryset.model) if ordering else ordering


def ordered_uniquely(terms, model) -> list[str]:
    """`terms` (field names, `-` for descending), then `-<primary key>` unless one of them is a unique field of
    `model` (a field of a related row, `team__name`, is unique for that row only)."""
    terms = list(terms)
    for term in terms:
        name = term.lstrip("-")
        if name == "pk":
            return terms
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:  # a related row's field or an annotation
            continue
        if getattr(field, "unique", False):
            return terms
    return [*terms, f"-{model._meta.pk.name}"]


def named_filters(filterset_class, keys):
    """`filterset_class` with only the filters `keys` (a query string's names) name: the filter's own name, or its
    name and a suffix for the fields of several inputs (`<name>_min`, `<name>_after`, ...)."""
    keys = set(keys)
    names = frozenset(
        name for name in filterset_class.base_filters if name in keys or any(key.startswith(f"{name}_") for key in keys)
    )
    return _filterset_of(filterset_class, names)


# Filters whose form field is made from the request (a queryset per user) or from the database (all values).
_FIELDS_PER_REQUEST = (QuerySetRequestMixin, AllValuesFilter, AllValuesMultipleFilter)


@functools.lru_cache(maxsize=512)
def _filterset_of(filterset_class, names: frozenset):
    """A subclass of `filterset_class` with the filters `names` names.

    When none of them makes its field per request (`_FIELDS_PER_REQUEST`) or filters with a method of its FilterSet
    (the method is bound to the filter it was set on, which a shallow copy would share), each FilterSet copies the
    filters shallowly, and its form class is made once, on first use, and copies its fields shallowly: django-filter
    deep-copies every filter and makes the form class anew on each request, and the form deep-copies its fields
    (most of the CPU of validating one filter), although such filters and fields hold nothing a request changes
    (validating reads a field, never writes it)."""
    if names == frozenset(filterset_class.base_filters):
        return filterset_class
    attributes = {"__module__": filterset_class.__module__}
    base_filters = {name: f for name, f in filterset_class.base_filters.items() if name in names}
    if not any(isinstance(f, _FIELDS_PER_REQUEST) or f.method is not None for f in base_filters.values()):
        attributes["get_form_class"] = _form_class_made_once
        base_filters = _CopiedShallowly(base_filters)
    subclass = type(filterset_class.__name__, (filterset_class,), attributes)
    subclass.base_filters = base_filters
    return subclass


class _CopiedShallowly(dict):
    """A FilterSet's `base_filters` or its form's `base_fields` that depend on nothing per request: the copy each
    FilterSet (which sets its own `parent` and `model` on each filter) or form takes is a shallow copy of each."""

    def __deepcopy__(self, memo):
        return {name: copy.copy(item) for name, item in self.items()}


def _form_class_made_once(filterset):
    """The form class of `filterset`'s class, made from its first instance's filters and kept on the class: their
    fields depend on the filters and the model only."""
    owner = type(filterset)
    form_class = owner.__dict__.get("_form_class")
    if form_class is None:
        form_class = super(owner, filterset).get_form_class()
        form_class.base_fields = _CopiedShallowly(form_class.base_fields)
        owner._form_class = form_class
    return form_class
