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
                                    "GH_TOKEN", "OCTOBER_CACHE_KEY"}


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


# --- query and fragment parameters that carry credentials (issue: a wheel URL's ?token= reached the lock,
# the receipt, logs/wheel.log and .state/wheel.json in clear) ---

@pytest.mark.parametrize("name", ["token", "access_token", "Sig", "X-Goog-Signature", "client_secret", "PASSWORD",
                                  "passwd", "api_key", "X-Goog-Credential", "auth", "sessionid",
                                  "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "sv", "se", "sp"])
def test_each_credential_parameter_name_is_masked_and_the_rest_kept(name: str) -> None:
    """One name per word of SECRET_PARAM_WORDS (any case) and per exact name of SECRET_PARAM_NAMES: dropping
    any of them leaks that parameter's value."""
    url = f"https://host.example/path/vllm-0.1.whl?a=1&{name}=Pl4nted%2Fsecret+v==&b=2#sha256=abc"
    assert redact_url(url) == f"https://host.example/path/vllm-0.1.whl?a=1&{name}={MASK}&b=2#sha256=abc"


def test_a_presigned_s3_url_keeps_what_is_not_a_credential() -> None:
    url = ("https://bucket.s3.amazonaws.com/w/vllm.whl?X-Amz-Algorithm=AWS4-HMAC-SHA256"
           "&X-Amz-Credential=AKIAEXAMPLE%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20250101T000000Z"
           "&X-Amz-Expires=3600&X-Amz-Security-Token=IQoJb3JpZ2luX2Vj&X-Amz-Signature=5d672d79c15b13162d9279b0855cfba6")
    out = redact_url(url)
    for secret in ("AKIAEXAMPLE", "IQoJb3JpZ2luX2Vj", "5d672d79c15b13162d9279b0855cfba6"):
        assert secret not in out
    assert out == ("https://bucket.s3.amazonaws.com/w/vllm.whl?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                   f"&X-Amz-Credential={MASK}&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600"
                   f"&X-Amz-Security-Token={MASK}&X-Amz-Signature={MASK}")


def test_an_azure_sas_is_masked() -> None:
    blob = "https://acct.blob.core.windows.net/c/vllm.whl"
    url = f"{blob}?sv=2022-11-02&se=2030-01-01T00%3A00Z&sr=b&sp=r&sig=Zm9v%2Bb2E%3D"
    assert redact_url(url) == f"{blob}?sv={MASK}&se={MASK}&sr=b&sp={MASK}&sig={MASK}"


@pytest.mark.parametrize("url", [
    "https://files.pythonhosted.org/packages/ab/cd/torch-2.10.0-cp312-none-linux_x86_64.whl#sha256=0123abcd",
    "https://download.pytorch.org/whl/cu129?page=2&per_page=50",
    "git+https://github.com/org/vllm.git@v1.0#egg=vllm&subdirectory=python",
    "https://host/p?spam=1&sve=2&apse=3&q=ok",                # sv/se/sp are exact names, not parts of names
    "https://host/p?token=&password",                       # an empty value, a name without one: nothing to hide
    "file:///tmp/links/?token",
])
def test_urls_without_a_secret_are_unchanged(url: str) -> None:
    assert redact_url(url) == url
    assert redact(f"uv pip install --find-links {url} torch") == f"uv pip install --find-links {url} torch"


def test_a_query_of_a_url_at_the_very_start_of_the_text_is_masked() -> None:
    assert redact_url("://h/x.whl?token=SEKRET") == f"://h/x.whl?token={MASK}"


def test_query_words_outside_a_url_are_left_alone() -> None:
    assert redact_url("the token=abc?sig=def is no URL") == "the token=abc?sig=def is no URL"


def test_fragments() -> None:
    """A secret's value ends at '#' (the fragment stays readable); a credential in the fragment itself
    (an OAuth implicit-flow redirect) is masked as in a query."""
    assert redact_url("https://h/x.whl?token=s3cr3t#sha256=ff00") == f"https://h/x.whl?token={MASK}#sha256=ff00"
    assert redact_url("https://h/cb#access_token=s3cr3t&state=7") == f"https://h/cb#access_token={MASK}&state=7"
    assert redact_url("https://h/x#egg=a&subdirectory=b") == "https://h/x#egg=a&subdirectory=b"


def test_a_secret_value_runs_to_the_next_parameter_whatever_it_holds() -> None:
    """'?', '/', ':', '@' and '=' may all stand in a query value: none of them ends a secret."""
    out = redact_url("https://h/p?sig=ab?cd/ef:gh@ij=kl&x=1")
    assert out == f"https://h/p?sig={MASK}&x=1"


def test_several_urls_in_one_text_each_in_its_quoting() -> None:
    text = ("uv pip install --find-links 'https://a.example/?token=T1a&x=1' "
            "--index-url https://u:p4ss@b.example/simple?key=T2b "
            'url = "http://127.0.0.1:8/vllm.whl?token=T3c&sig=T4d" (`https://c.example/?auth=T5e`) '
            "<https://d.example/?Password=T6f> and https://e.example/plain?q=1")
    out = redact(text)
    for secret in ("T1a", "p4ss", "T2b", "T3c", "T4d", "T5e", "T6f"):
        assert secret not in out
    assert out == ("uv pip install --find-links 'https://a.example/?token=***&x=1' "
                   "--index-url https://***@b.example/simple?key=*** "
                   'url = "http://127.0.0.1:8/vllm.whl?token=***&sig=***" (`https://c.example/?auth=***`) '
                   "<https://d.example/?Password=***> and https://e.example/plain?q=1")


def test_a_url_nested_in_a_query_is_masked_too() -> None:
    out = redact_url("https://sso.example/login?next=https://u:pw@h.example/p?api_key=K3y&state=1#frag")
    assert out == f"https://sso.example/login?next=https://{MASK}@h.example/p?api_key={MASK}&state=1#frag"


def test_query_masking_is_linear() -> None:
    """Every search starts where the last ended: adversarial shapes of 300,000 characters stay fast."""
    import time

    n = 300_000
    for text in ("https://h/?" + "token=" * (n // 6), "https://h/" + "?a=b&" * (n // 5), "://?" * (n // 4),
                 "https://h/?token=" + "?" * n, "https://h/?" + "&token=x" * (n // 8), "a://b?c=d " * (n // 10),
                 "https://h/?" + "=" * n, "https://h/?" + "#" * n):
        start = time.thread_time()
        redact(text)
        assert time.thread_time() - start < 0.5, text[:20]
