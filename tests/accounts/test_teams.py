"""Teams: create (creator owns it), invitation link, join, owners remove members."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import INVITATION_TTL, TeamInvitation, TeamOwnership
from submissions.models import Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("olga", "olga@example.org", "pw-olga-12345")


@pytest.fixture
def guest() -> User:
    return User.objects.create_user("gus", "gus@example.org", "pw-gus-12345")


def test_create_team_makes_creator_member_and_owner(client: Client, owner: User) -> None:
    client.force_login(owner)
    response = client.post(reverse("accounts:team-create"), {"name": "  route-runners "})
    assert response.status_code == 302
    team = Team.objects.get(name="route-runners")
    assert list(team.members.all()) == [owner]
    assert services.is_owner(team, owner)
    taken = client.post(reverse("accounts:team-create"), {"name": "ROUTE-RUNNERS"}, follow=True)
    assert "already exists" in taken.content.decode()
    assert Team.objects.count() == 1


def test_invite_join_and_remove(client: Client, owner: User, guest: User) -> None:
    team = services.team_create(user=owner, name="k8s-keepers")
    client.force_login(owner)
    client.post(reverse("accounts:invite", args=[team.pk]))
    token = TeamInvitation.objects.get(team=team).token
    page = client.get(reverse("accounts:team")).content.decode()
    assert f"http://testserver/accounts/join/{token}/" in page

    guest_client = Client()
    anonymous = guest_client.get(reverse("accounts:join", args=[token])).content.decode()
    assert "Join k8s-keepers" in anonymous and "Log in" in anonymous
    guest_client.force_login(guest)
    joined = guest_client.post(reverse("accounts:join", args=[token]))
    assert joined.status_code == 302
    assert set(team.members.all()) == {owner, guest}
    assert not services.is_owner(team, guest)

    # A member who does not own the team can neither invite nor remove.
    guest_client.post(reverse("accounts:member-remove", args=[team.pk, owner.pk]))
    guest_client.post(reverse("accounts:invite", args=[team.pk]))
    assert set(team.members.all()) == {owner, guest}
    assert TeamInvitation.objects.get(team=team).token == token

    client.post(reverse("accounts:member-remove", args=[team.pk, guest.pk]))
    assert list(team.members.all()) == [owner]


def test_new_link_replaces_old_and_links_expire(owner: User, guest: User) -> None:
    team = services.team_create(user=owner, name="malt-makers")
    first = services.invitation_renew(team=team, by=owner).token
    second = services.invitation_renew(team=team, by=owner).token
    assert first != second
    with pytest.raises(services.InvitationInvalidError):
        services.team_join(user=guest, token=first)
    TeamInvitation.objects.filter(team=team).update(
        created_at=TeamInvitation.objects.get(team=team).created_at - INVITATION_TTL
        - timedelta(seconds=1)
    )
    with pytest.raises(services.InvitationInvalidError):
        services.team_join(user=guest, token=second)
    assert Client().get(reverse("accounts:join", args=[second])).status_code == 404


def test_last_owner_stays(owner: User, guest: User) -> None:
    team = services.team_create(user=owner, name="solo")
    with pytest.raises(services.LastOwnerError):
        services.member_remove(team=team, by=owner, member=owner)
    TeamOwnership.objects.create(team=team, user=guest)
    team.members.add(guest)
    services.member_remove(team=team, by=guest, member=owner)
    assert list(team.members.all()) == [guest]
    assert not services.is_owner(team, owner)


def test_a_user_owns_or_joins_at_most_teams_per_user_teams(
    client: Client, owner: User, guest: User, settings
) -> None:
    settings.NETARENA = {**settings.NETARENA, "TEAMS_PER_USER": 2}
    services.team_create(user=guest, name="guest-1")
    services.team_create(user=guest, name="guest-2")
    with pytest.raises(services.TeamLimitError, match="already belong to 2 teams") as refused:
        services.team_create(user=guest, name="guest-3")
    assert refused.value.code == "team_limit" and refused.value.http_status == 409
    team = services.team_create(user=owner, name="owned")
    token = services.invitation_renew(team=team, by=owner).token
    with pytest.raises(services.TeamLimitError):
        services.team_join(user=guest, token=token)
    assert not team.members.filter(pk=guest.pk).exists()
    # the pages show the refusal
    client.force_login(guest)
    page = client.post(reverse("accounts:join", args=[token]), follow=True).content.decode()
    assert "already belong to 2 teams" in page
    created = client.post(reverse("accounts:team-create"), {"name": "g3"}, follow=True)
    assert "already belong to 2 teams" in created.content.decode()
    assert Team.objects.filter(members=guest).count() == 2
    # joining a team one is already in is still a no-op, not a refusal
    services.team_join(user=owner, token=token)


def test_removing_a_member_rotates_the_invitation_link(owner: User, guest: User) -> None:
    team = services.team_create(user=owner, name="rotators")
    old = services.invitation_renew(team=team, by=owner).token
    services.team_join(user=guest, token=old)
    services.member_remove(team=team, by=owner, member=guest)
    new = TeamInvitation.objects.get(team=team).token
    assert new != old
    with pytest.raises(services.InvitationInvalidError):
        services.team_join(user=guest, token=old)
    assert not team.members.filter(pk=guest.pk).exists()
    services.team_join(user=guest, token=new)  # the owners' new link works
    assert team.members.filter(pk=guest.pk).exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x" * 101, "at most 100 characters"),
        ("nul\x00team", "cannot contain control characters"),
        ("two\nlines", "cannot contain control characters"),
    ],
)
def test_team_names_a_database_would_refuse_are_refused_with_a_message(
    client: Client, owner: User, name: str, message: str
) -> None:
    """Too long for the column (PostgreSQL: 500 before, SQLite stored it) or holding NUL
    (PostgreSQL refuses it in text): the same clear refusal on every database."""
    with pytest.raises(services.TeamError, match=message):
        services.team_create(user=owner, name=name)
    client.force_login(owner)
    response = client.post(reverse("accounts:team-create"), {"name": name}, follow=True)
    assert response.status_code == 200 and response.redirect_chain[0][1] == 302
    assert message in response.content.decode()
    assert not Team.objects.exists()
    assert services.team_create(user=owner, name="y" * 100).name == "y" * 100  # the limit


@pytest.mark.django_db(transaction=True)
def test_parallel_registrations_while_a_worker_writes_never_see_a_locked_database() -> None:
    """A dozen users create teams at once (each its own connection, as the web's requests)
    while a "worker" keeps taking the write lock (as Celery workers storing episodes). On the
    SQLite demo database this gave "database is locked" (500s) before WAL + IMMEDIATE
    transactions (config/settings.py); on PostgreSQL it must hold too."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    users = [User.objects.create_user(f"user{i}") for i in range(12)]
    busy = Team.objects.create(name="busy")
    stop, start = threading.Event(), threading.Barrier(len(users) + 1)

    def worker() -> int:
        writes = 0
        try:
            start.wait()
            while not stop.is_set():
                with transaction.atomic():
                    Team.objects.filter(pk=busy.pk).update(name=f"busy-{writes}")
                    time.sleep(0.005)  # holds the write lock for a while
                writes += 1
                time.sleep(0.001)
            return writes
        finally:
            connection.close()

    def register(user: User) -> list[str]:
        try:
            start.wait()
            names = [services.team_create(user=user, name=f"{user.username}-{k}").name
                     for k in range(3)]
            with transaction.atomic():  # read, then write: the upgrade that failed at once
                services.invitation_renew(team=Team.objects.get(name=names[0]), by=user)
            return names
        finally:
            connection.close()

    with ThreadPoolExecutor(len(users) + 1) as pool:
        writing = pool.submit(worker)
        registered = [pool.submit(register, user) for user in users]
        try:
            names = [name for future in registered for name in future.result(timeout=60)]
        finally:
            stop.set()
        assert writing.result(timeout=30) > 0
    assert len(names) == 36 and Team.objects.filter(name__in=names).count() == 36
    assert TeamInvitation.objects.count() == len(users)
