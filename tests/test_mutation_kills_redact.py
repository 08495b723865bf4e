"""Redaction, one pattern at a time (bench/mutate.py's `redact` module): each secret below is caught
by exactly one mask, so deleting or weakening that mask leaks it and the test fails."""

from __future__ import annotations

import pytest

from october.installer.core.redact import MASK, SECRET_ENV_VARS, env_secrets, redact, redact_url


def test_an_hf_token_alone_is_masked_by_the_hf_pattern() -> None:
    token = "hf_" + "AbC123xyZ0" * 3
    out = redact(f"downloading with token {token} now")
    assert token not in out and out == f"downloading with token {MASK} now"


def test_a_short_hf_prefix_is_not_a_token() -> None:
    assert redact("hf_abc and path/hf_1234567") == "hf_abc and path/hf_1234567"


def test_a_bearer_header_alone_is_masked_by_the_bearer_pattern() -> None:
    secret = "eyJhbGciOi.J9-opaque_value"          # no hf_ prefix, no URL, not a named secret
    out = redact(f"header Authorization: Bearer {secret} sent to https://host/x")
    assert secret not in out
    assert out == f"header Authorization: Bearer {MASK} sent to https://host/x"


def test_the_bearer_pattern_ignores_case() -> None:
    assert redact("AUTHORIZATION:bearer s3cretvalue") == f"AUTHORIZATION:bearer {MASK}"


def test_a_named_secret_alone_is_masked_wherever_it_appears() -> None:
    secret = "plain-s3cret"                        # matches no pattern: only the named-secret mask hides it
    out = redact(f"a {secret} b {secret}", secrets=[secret])
    assert out == f"a {MASK} b {MASK}"


def test_named_secrets_longest_first() -> None:
    # "abcd" inside "abcdefgh": masking the short one first would leave "efgh" of the long one behind
    assert redact("key=abcdefgh", secrets=["abcd", "abcdefgh"]) == f"key={MASK}"


def test_named_secrets_shorter_than_four_characters_are_not_masked() -> None:
    # masking "ab" would rewrite every word that contains it: such values are not treated as secrets
    assert redact("about abc", secrets=["ab", "abc", "", "x"]) == "about abc"
    assert redact("code 4242", secrets=["4242"]) == f"code {MASK}"


def test_url_credentials_are_masked_and_the_rest_is_kept() -> None:
    url = "https://user:pa55word@git.example.org/org/repo.git"
    assert redact(url) == f"https://{MASK}@git.example.org/org/repo.git"
    assert redact_url(url) == f"https://{MASK}@git.example.org/org/repo.git"
    assert redact_url("https://tok3n@host/x") == f"https://{MASK}@host/x"
    assert redact_url("https://host/x@y") == "https://host/x@y"


def test_env_secrets_reads_every_token_variable() -> None:
    env = {name: f"value-of-{name.lower()}" for name in SECRET_ENV_VARS}
    assert env_secrets(env) == [env[name] for name in SECRET_ENV_VARS]
    assert set(SECRET_ENV_VARS) == {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "GITHUB_TOKEN",
                                    "GH_TOKEN"}


@pytest.mark.parametrize("name", SECRET_ENV_VARS)
def test_each_token_variable_alone_is_masked(name: str) -> None:
    value = "opaque-" + name.lower()
    assert env_secrets({name: value, "PATH": "/usr/bin"}) == [value]
    assert redact(f"token {value} used", env_secrets({name: value})) == f"token {MASK} used"


def test_env_secrets_length_threshold() -> None:
    # four characters and more is a secret; three or fewer is not (it would mask common words)
    assert env_secrets({"HF_TOKEN": "abcd"}) == ["abcd"]
    assert env_secrets({"HF_TOKEN": "abc"}) == []
    assert env_secrets({"HF_TOKEN": "", "GH_TOKEN": "ghp_longer_value"}) == ["ghp_longer_value"]


def test_env_secrets_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRET_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GH_TOKEN", "from-the-process")
    assert env_secrets() == ["from-the-process"]
    assert env_secrets({}) == []


def test_a_url_at_the_very_start_of_the_text_is_masked() -> None:
    """The first ``://`` may be at index 0 (text cut just after a scheme): its credentials are masked too."""
    assert redact_url("://oct:SEKRET@host/simple") == f"://{MASK}@host/simple"


def test_an_empty_user_part_is_left_as_it_is() -> None:
    """``https://@host`` has nothing before its ``@`` to hide: the text stays as written."""
    assert redact_url("https://@host/x and https://u:p@h/y") == f"https://@host/x and https://{MASK}@h/y"
