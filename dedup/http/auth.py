"""Who is calling: Firebase ID token verification for `idempotent_http` (`firebase_uid`, the
default `TokenVerifier`) and the bearer token of a request."""

from __future__ import annotations

from collections.abc import Callable

import flask

from dedup.platform.firebase_app import default_app


class InvalidToken(Exception):
    """The bearer token is missing or not a valid Firebase ID token (answered 401)."""


class AuthUnavailable(Exception):
    """The token could not be checked now (certificates unreachable; answered 503)."""


TokenVerifier = Callable[[str], str]
"""`verify(id_token) -> uid`; raises `InvalidToken` or `AuthUnavailable`."""


def ensure_firebase_app() -> None:
    """Create the default firebase_admin app unless it exists (no network call; thread-safe,
    `dedup.platform.firebase_app`).

    ID tokens are verified through it: by `firebase_uid`, and by firebase-functions before a
    callable's handler runs, which is why a module that declares a callable calls this at
    import time.
    """
    default_app()


def firebase_uid(id_token: str, *, check_revoked: bool = False) -> str:
    """The uid of a verified Firebase ID token (signature, expiry, audience and issuer; the
    Auth emulator's unsigned tokens when FIREBASE_AUTH_EMULATOR_HOST is set). Revocation is
    checked only with `check_revoked` (one more RPC). Raises `InvalidToken`/`AuthUnavailable`."""
    from firebase_admin import auth

    ensure_firebase_app()
    try:
        claims = auth.verify_id_token(id_token, check_revoked=check_revoked)
    except auth.CertificateFetchError as exc:
        raise AuthUnavailable("the ID token's certificates could not be fetched") from exc
    except (ValueError, auth.InvalidIdTokenError, auth.UserDisabledError) as exc:
        raise InvalidToken("the ID token is invalid, expired or revoked") from exc
    uid = claims.get("uid") or claims.get("sub")
    if not isinstance(uid, str) or not uid:
        raise InvalidToken("the ID token names no user")
    return uid


def bearer_token(request: flask.Request) -> str:
    """The token of `Authorization: Bearer <token>`; `InvalidToken` when there is none."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidToken("send `Authorization: Bearer <Firebase ID token>`")
    return token.strip()
