"""The shared file rules: nested .gitignore files, secrets, binaries, links out of the tree."""
from lsp_server.serving.files import GitIgnore, is_secret, read_text


def test_each_gitignore_applies_below_its_folder(tmp_path):
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / ".gitignore").write_text("generated_*.py\n!keep.log\n")
    for name in ("a.py", "a.log", "build/x.py", "pkg/b.py", "pkg/generated_c.py", "pkg/keep.log",
                 "node_modules/m.js", "other/generated_d.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "outside_link.py").symlink_to("/etc/hostname")
    found = {p.relative_to(tmp_path).as_posix() for p in GitIgnore(tmp_path).walk()}
    assert found == {".gitignore", "a.py", "pkg/.gitignore", "pkg/b.py", "pkg/keep.log",
                     "other/generated_d.py", "outside_link.py"}


def test_secrets_are_recognised_by_name():
    assert all(is_secret(n) for n in (".env", ".env.local", "server.pem", "tls.key", "id_rsa"))
    assert not any(is_secret(n) for n in ("env.py", "keys.py", "identity.py"))


def test_read_text_says_why_it_refuses(tmp_path):
    (tmp_path / "bin").write_bytes(b"\x00\x01")
    (tmp_path / "latin1").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "big").write_text("x" * 100)
    (tmp_path / "ok").write_text("print('ok')\n")
    assert read_text(tmp_path / "bin", 50) == (None, "binary")
    assert read_text(tmp_path / "latin1", 50) == (None, "not UTF-8")
    assert read_text(tmp_path / "big", 50) == (None, "too large")
    assert read_text(tmp_path / "missing", 50) == (None, "unreadable")
    assert read_text(tmp_path / "ok", 50) == ("print('ok')\n", "")
