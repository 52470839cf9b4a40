"""The OpenAPI schema (drf-spectacular) and its docs page, served without any CDN."""

from __future__ import annotations

import re

import pytest
import yaml
from django.test import Client
from django.urls import reverse


@pytest.mark.django_db
def test_schema_is_openapi_3_with_token_auth(client: Client) -> None:
    response = client.get(reverse("api-schema"))
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "NetArena Leaderboard API"
    assert {
        "/api/v1/agents/",
        "/api/v1/submissions/",
        "/api/v1/submissions/{submission_id}/",
        "/api/v1/leaderboard/",
    } <= set(schema["paths"])
    assert "requestBody" in schema["paths"]["/api/v1/submissions/"]["post"]
    schemes = schema["components"]["securitySchemes"]
    assert schemes["tokenAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": 'Token-based authentication with required prefix "Token"',
    }


@pytest.mark.django_db
def test_docs_page_loads_swagger_ui_from_local_static_files(client: Client) -> None:
    page = client.get(reverse("api-docs")).content.decode()
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', page)
    assert any("swagger-ui-bundle" in src for src in scripts)
    assert all(src.startswith("/static/") for src in scripts), scripts
    assert reverse("api-schema") in page


@pytest.mark.django_db
def test_navigation_links_the_api_docs(client: Client) -> None:
    page = client.get(reverse("leaderboard:index")).content.decode()
    assert f'href="{reverse("api-docs")}"' in page
