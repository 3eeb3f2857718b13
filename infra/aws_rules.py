"""Rules AWS documents and enforces that the emulators here do not, in one place.

Used by the test harness's AWS (`moto_serialized.py` refuses what Cognito refuses) and by the
template checks (`tests/tests/aws_rules.rs` runs `python3 infra/aws_rules.py cognito-client
JSON` on every app client of `template.yaml`), so the template's clients and the clients the
code registers are held to the same rule. No third-party imports: it runs on any Python 3.

    python3 infra/aws_rules.py cognito-client '{"ExplicitAuthFlows": [...], ...}'
        prints the refusal and exits 1, or prints "ok"
"""

import json
import re
import sys


def cognito_client_problem(params):
    """Why Cognito refuses this CreateUserPoolClient/UpdateUserPoolClient, or None.

    Each rule is one Cognito documents (docs/deploy.md, "What AWS refuses") and moto does not
    enforce:
    - Refresh-token rotation is incompatible with REFRESH_TOKEN_AUTH: "You can't authenticate
      with REFRESH_TOKEN_AUTH in app clients with refresh token rotation enabled", and rotation
      requires that flow disabled (developerguide/amazon-cognito-user-pools-using-the-refresh-
      token.html). Leaving ExplicitAuthFlows out means the default set, which has it.
    - Explicit flows that leave out ALLOW_REFRESH_TOKEN_AUTH without rotation: Cognito answers
      InvalidParameterException "REFRESH_TOKEN_AUTH should always be allowed."
    - Token lifetimes: access and ID tokens 5 minutes to 1 day, refresh tokens 60 minutes to
      10 years (API_TokenValidityUnitsType); the rotation grace 0 to 60 s
      (API_RefreshTokenRotationType).
    - Input rules of the API model (API_CreateUserPoolClient, botocore's cognito-idp model):
      ClientName 1-128 of `[\\w\\s+=,.@-]+`; each CallbackURLs/LogoutURLs entry 1-1024
      characters of `[\\p{L}\\p{M}\\p{S}\\p{N}\\p{P}]+` (no white space), at most 100 of
      each; at most 50 scopes. Cognito answers InvalidParameterException ("1 validation error
      detected: …").
    """
    problem = _input_problem(params)
    if problem:
        return problem
    flows = params.get("ExplicitAuthFlows")
    rotation = (params.get("RefreshTokenRotation") or {})
    rotating = rotation.get("Feature") == "ENABLED"
    if rotating and (flows is None or "ALLOW_REFRESH_TOKEN_AUTH" in flows):
        return ("Refresh token rotation can't be enabled together with ALLOW_REFRESH_TOKEN_AUTH "
                "(ExplicitAuthFlows, or its default set when left out)")
    if not rotating and flows and "ALLOW_REFRESH_TOKEN_AUTH" not in flows:
        return "REFRESH_TOKEN_AUTH should always be allowed."
    grace = rotation.get("RetryGracePeriodSeconds")
    if grace is not None and not 0 <= grace <= 60:
        return "RetryGracePeriodSeconds must be between 0 and 60"
    units = params.get("TokenValidityUnits") or {}
    minutes = {"seconds": 1 / 60, "minutes": 1, "hours": 60, "days": 1440}
    for field, unit_key, default_unit, low, high in [
        ("AccessTokenValidity", "AccessToken", "hours", 5, 1440),
        ("IdTokenValidity", "IdToken", "hours", 5, 1440),
        ("RefreshTokenValidity", "RefreshToken", "days", 60, 3650 * 1440),
    ]:
        value = params.get(field)
        if value is None:
            continue
        m = value * minutes.get(units.get(unit_key, default_unit), 1)
        if not low <= m <= high:
            return f"{field} must be between {low} and {high} minutes (got {value} {units.get(unit_key, default_unit)})"
    return None


CLIENT_NAME = re.compile(r"^[\w\s+=,.@-]{1,128}$")
CLIENT_ID = re.compile(r"^[\w+]{1,128}$")


def _input_problem(params):
    name = params.get("ClientName")
    if name is not None and not CLIENT_NAME.match(name):
        return f"1 validation error detected: Value '{name}' at 'clientName' failed to satisfy constraint"
    for field in ("CallbackURLs", "LogoutURLs"):
        urls = params.get(field) or []
        if len(urls) > 100:
            return f"1 validation error detected: Value at '{field[0].lower() + field[1:]}' failed to satisfy constraint: Member must have length less than or equal to 100"
        for u in urls:
            if not 1 <= len(u) <= 1024 or any(c.isspace() or ord(c) < 0x20 for c in u):
                return (f"1 validation error detected: Value '[{u}]' at '{field[0].lower() + field[1:]}' failed to satisfy "
                        "constraint: Member must satisfy constraint: [Member must have length less than or equal to 1024, "
                        "Member must have length greater than or equal to 1, Member must satisfy regular expression "
                        "pattern: [\\p{L}\\p{M}\\p{S}\\p{N}\\p{P}]+]")
    if len(params.get("AllowedOAuthScopes") or []) > 50:
        return "1 validation error detected: Value at 'allowedOAuthScopes' failed to satisfy constraint: Member must have length less than or equal to 50"
    return None


def cognito_client_id_problem(params):
    """Why Cognito refuses the ClientId of a Describe/Update/DeleteUserPoolClient, or None:
    `[\\w+]+`, 1 to 128 characters (API_DescribeUserPoolClient). Moto looks any string up."""
    client_id = params.get("ClientId")
    if client_id is not None and not CLIENT_ID.match(client_id):
        return f"1 validation error detected: Value '{client_id}' at 'clientId' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+]+"
    return None


def main(argv):
    if len(argv) == 3 and argv[1] == "cognito-client":
        problem = cognito_client_problem(json.loads(argv[2]))
        print(problem or "ok")
        return 1 if problem else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
