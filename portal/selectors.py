"""Reads for the portal's own pages."""

from django.db.models import Count

from .models import Membership, Team


def teams_for_overview(user):
    """The user's teams with their member counts, and the user's role in each (None for admin-only access)."""
    teams = Team.objects.visible_to(user).annotate(member_count=Count("memberships", distinct=True)).order_by("name")
    roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
    return [(team, roles.get(team.id)) for team in teams]
