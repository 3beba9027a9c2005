"""Repository context: the right definitions reach the prompt, refused files never do, the work
is bounded in a huge workspace, bad files are skipped, and the model's repository format is
used where its tokenizer has one."""
from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer

from engine.loading.fetch import model_path
from engine.tokenization import load_tokenizer
from engine.tokenization.tokenizer import Tokenizer
from lsp_server.completion.prompt import Block, Cursor, build_prompt
from lsp_server.serving.documents import Documents
from lsp_server.options import Settings
from lsp_server.completion.outline import imports, outline
from lsp_server.completion.repo_context import MAX_OUTLINED, Repository, choose, module_paths, names_near
from lsp_server.completion.suggester import Plan, Suggester, plan
from lsp_server.serving.workspace import MAX_FILES, WorkspaceIndex
from tests.models import REAL

SHOP = Path(__file__).parent / "fixtures" / "shop_repo"
ADD_LINE = "def add_line(self, sku: str, quantity: int, unit_price_cents: int) -> LineItem:"


SETTINGS = Settings(maxTokens=8)  # the repository context on, as by default


def indexed(root: Path, scans: int = 1) -> Documents:
    """The store of documents as the server fills it: its files from the workspace index."""
    documents = Documents(root.resolve())
    index = WorkspaceIndex(root, documents.file_changed, documents.file_removed)
    for _ in range(scans):
        index.scan()
    return documents


def at_line(root: Path, path: str, line_start: str, typed: str = "") -> Plan:
    """The plan for writing the line that starts with `line_start` in `path` (that line removed
    after its indentation, `typed` typed)."""
    lines = (root / path).read_text().split("\n")
    number = next(i for i, line in enumerate(lines) if line.strip().startswith(line_start))
    indent = lines[number][:len(lines[number]) - len(lines[number].lstrip())]
    lines[number] = indent + typed
    return plan(path, "\n".join(lines), number, len(indent + typed), Settings(), path)


def prompt_text(suggester: Suggester, where: Plan, settings: Settings = SETTINGS) -> str:
    """The full window's prompt (no cold rule: coldPrefillMs 0)."""
    prompt, full = suggester.prompt_for(where.cursor, suggester.context_for(where, settings), where.path,
                                        replace(settings, coldPrefillMs=0))
    assert full is None
    return prompt if isinstance(prompt, str) else suggester.engine.tokenizer.decode(prompt)


def suggester_for(engine, documents: Documents) -> Suggester:
    return Suggester(engine, documents)


def test_the_definition_a_line_uses_from_another_module_lands_in_the_prompt(fp32_engine):
    where = at_line(SHOP, "shop/checkout.py", "basket.add_line(")
    suggester = suggester_for(fp32_engine, indexed(SHOP))
    prompt = prompt_text(suggester, where)
    assert "# shop/models.py\n" in prompt and ADD_LINE in prompt
    assert "self.items.append(item)" not in prompt  # bodies are cut
    assert prompt.index(ADD_LINE) < prompt.index("def checkout(")  # other files first
    # The settings of each call count: the same suggester, the repository context off.
    assert ADD_LINE not in prompt_text(suggester, where, Settings(repoContext=False, maxTokens=8))


def test_the_context_stays_put_while_typing_so_the_cache_is_reused(fp32_engine):
    suggester = suggester_for(fp32_engine, indexed(SHOP))
    whole = replace(SETTINGS, coldPrefillMs=0)  # the full window whatever this machine's load
    runs = []
    for typed in ("bas", "bask", "baske"):
        where = at_line(SHOP, "shop/checkout.py", "basket.add_line(", typed)
        runs.append(suggester.generate(where, whole, threading.Event()).stats)
        assert ADD_LINE in prompt_text(suggester, where)
    for stats in runs[1:]:  # one keystroke: the repository context and the window are reused
        assert stats.prompt_tokens > 100 and stats.new_prompt_tokens <= 4


def test_names_near_the_cursor_leave_out_the_word_being_typed_and_builtins():
    cursor = Cursor("total = Basket(owner)\nitems = len(total.items)\nresult = compute_tot", "\nprint(result)\n")
    assert names_near(cursor) == ("result", "items", "total", "Basket", "owner")


def test_relative_and_absolute_imports_name_their_files():
    assert module_paths(".models", "shop/checkout.py") == ("shop/models.py", "shop/models/__init__.py")
    assert module_paths("..core.db", "shop/api/views.py") == ("shop/core/db.py", "shop/core/db/__init__.py")
    assert module_paths("shop.models", "x.py") == ("shop/models.py", "shop/models/__init__.py")
    text = "from .models import (Basket,  # the cart\n    LineItem)\nimport os.path, json as j\nfrom . import x"
    assert [(i.module, i.names) for i in imports(text)] == [
        (".models", ("Basket", "LineItem")), (".", ("x",)), ("os.path", ()), ("json", ())]


def test_an_unparsable_file_falls_back_to_its_definition_lines():
    broken = outline("class Half:\n    def method(self, x):\n        return (\n\ndef other(a, b):\n", python=True)
    assert not broken.parsed
    assert broken.find("method").text == "    def method(self, x):" and broken.find("other").text == "def other(a, b):"
    go = outline("package x\n\nfunc Parse(s string) (int, error) {\n\treturn 0, nil\n}\n", python=False)
    assert go.find("Parse").text == "func Parse(s string) (int, error) {"


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(SHOP, root)
    (root / ".gitignore").write_text("generated/\n")
    (root / "generated").mkdir()
    (root / "generated" / "pricing.py").write_text("def discount_cents(total):\n    return 'GITIGNORED-BODY'\n"
                                                   "class Coupon:\n    '''GITIGNORED-DOC'''\n")
    (root / ".env").write_text("discount_cents = 'ENV-SECRET'\n")
    (root / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\ndef discount_cents(): PEM-SECRET\n")
    (root / "id_rsa").write_text("class Coupon: RSA-SECRET\n")
    (root / "shop" / "orders.py").write_text(
        "from generated.pricing import discount_cents, Coupon\nfrom .models import Basket\n\n\n"
        "def order_total(basket: Basket, coupon: Coupon) -> int:\n"
        "    cents = discount_cents(basket.total_cents())\n    return cents\n")
    return root


def test_ignored_and_secret_files_never_enter_a_prompt(fp32_engine, tmp_path):
    root = _workspace(tmp_path)
    documents = indexed(root)
    where = at_line(root, "shop/orders.py", "return cents")
    prompt = prompt_text(suggester_for(fp32_engine, documents), where)
    assert "def total_cents(self) -> int:" in prompt  # the context works here...
    for secret in ("GITIGNORED", "ENV-SECRET", "PEM-SECRET", "RSA-SECRET", "PRIVATE KEY"):
        assert secret not in prompt  # ...but not from refused files
    assert not documents.repository.defining("discount_cents") and not documents.repository.defining("Coupon")


def test_a_huge_workspace_costs_bounded_work(tmp_path):
    """More files than the index takes (its cap and a thousand), all defining the names near the
    cursor: the index stops at its cap and the choice outlines at most MAX_OUTLINED files."""
    root = tmp_path / "huge"
    for i in range(MAX_FILES + 1000):
        folder = root / f"pkg{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"def shared(x):\n    return x + {i}\n\n\nclass Thing{i % 7}:\n    size = {i}\n")
    repository = indexed(root).repository
    assert len(repository.defining("shared")) == MAX_FILES
    text = "from pkg0.mod1 import shared\n" + "".join(f"value{i} = shared(Thing{i % 7}())\n" for i in range(40))
    cursor = Cursor(text, "\n")
    choice = choose("main.py", cursor, {}, repository, names_near(cursor))
    assert 0 < choice.outlined <= MAX_OUTLINED
    assert choice.blocks[0] == Block("pkg0/mod1.py", "def shared(x):\n    ...")  # the file the import names


def test_bad_files_are_skipped_once_and_the_suggestion_still_comes(fp32_engine, tmp_path, caplog):
    root = tmp_path / "bad"
    shutil.copytree(SHOP, root)
    (root / "shop" / "broken.py").write_text("def restock(sku: str, count: int) -> None:\n    if (\n")
    (root / "shop" / "blob.py").write_bytes(b"def x():\0\0\0binary")
    (root / "shop" / "huge.py").write_bytes(b"")
    os.truncate(root / "shop" / "huge.py", 50 * 2**20)  # 50 MB, without writing them
    os.symlink("loop_b.py", root / "shop" / "loop_a.py")
    os.symlink("loop_a.py", root / "shop" / "loop_b.py")
    (root / "shop" / "stock.py").write_text("from .broken import restock\n\n\ndef refill(sku):\n    pass\n")
    with caplog.at_level(logging.INFO):
        documents = indexed(root, scans=2)  # the second scan must not log again
        where = at_line(root, "shop/stock.py", "pass")
        suggester = suggester_for(fp32_engine, documents)
        suggestion = suggester.generate(where, SETTINGS, threading.Event())
        prompt_text(suggester, where)
    assert suggestion.stats.new_tokens > 0
    assert "def restock(sku: str, count: int) -> None:" in prompt_text(suggester, where)  # by regex
    skips = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    for name, why in (("blob.py", "binary"), ("huge.py", "too large"), ("loop_a.py", "a symlink loop"),
                      ("loop_b.py", "a symlink loop")):
        assert sum(name in s and why in s for s in skips) == 1, (name, skips)
    assert sum("broken.py is not valid Python" in r.getMessage() for r in caplog.records) == 1


def _qwen_like(engine, tmp_path: Path, repo_tokens: bool) -> Tokenizer:
    """The embedded vocabulary plus Qwen2.5-Coder's FIM (and repository) special tokens."""
    engine.tokenizer.save(tmp_path / "tokenizer.json")
    hf = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    specials = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
    hf.add_special_tokens(specials + (["<|repo_name|>", "<|file_sep|>"] if repo_tokens else []))
    return Tokenizer(hf, set())


def test_other_files_go_in_as_comments_without_a_repository_format(fp32_engine, tmp_path):
    tok = _qwen_like(fp32_engine, tmp_path, repo_tokens=False)
    assert tok.fim is not None and tok.repo is None
    ids = build_prompt(Cursor("x = ", "\n"), tok, 32768, [Block("shop/models.py", "class Basket:")], path="a.py")
    assert ids[0] == tok.fim.prefix and tok.decode(ids[1:]).startswith("# shop/models.py\nclass Basket:\n\nx = ")


@pytest.mark.real_model  # the real model's tokenizer
def test_the_real_models_repository_format_is_used():
    tok = load_tokenizer(model_path(REAL))  # the tokenizer alone: metadata, no weights
    assert tok.repo is not None and tok.fim is not None
    blocks = [Block("shop/models.py", "class Basket:\n    owner: str"), Block("shop/util.py", "def f(): ...")]
    ids = build_prompt(Cursor("x = ", "\ny = 1\n"), tok, 32768, blocks, path="shop/checkout.py", repo_name="shop_repo")
    seps = [i for i, t in enumerate(ids) if t == tok.repo.file_sep]
    assert ids[0] == tok.repo.name and len(seps) == 3 and ids[seps[-1]:].count(tok.fim.prefix) == 1
    assert tok.decode(ids[seps[0] + 1:seps[1]]) == "shop/models.py\nclass Basket:\n    owner: str\n"
    assert tok.decode(ids[seps[2] + 1:ids.index(tok.fim.prefix)]) == "shop/checkout.py\n"
    assert build_prompt(Cursor("x = ", "\n"), tok, 32768)[0] == tok.fim.prefix  # no other files: plain FIM


@pytest.mark.real_model  # the real model's tokenizer
def test_a_served_qwen_gets_the_repository_format_as_text():
    """With --endpoint and the served model's tokenizer, the special tokens go as their names."""
    from engine.remote.engine import Endpoint, RemoteEngine

    tok = load_tokenizer(model_path(REAL))
    engine = RemoteEngine(Endpoint.parse("http://127.0.0.1:9"), local_tokenizer=tok)
    ids = build_prompt(Cursor("x = ", "\n"), tok, 32768, [Block("m.py", "def f(): ...")], path="a.py", repo_name="r")
    assert engine.prompt_text(ids) == ("<|repo_name|>r\n<|file_sep|>m.py\ndef f(): ...\n<|file_sep|>a.py\n"
                                       "<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>")


def test_the_regions_edited_last_in_other_open_documents_come_in():
    repository = Repository()
    repository.edited("a.py", 10, 10)
    repository.edited("a.py", 11, 11)  # typing on: the same range grows
    repository.edited("b.py", 3, 3)
    assert repository.recent_edits() == [("b.py", 3, 3), ("a.py", 10, 11)]
    others = {"b.py": "\n".join(f"line{i}" for i in range(10))}
    blocks = choose("a.py", Cursor("x = 1\n", ""), others, repository, ()).blocks
    assert blocks == [Block("b.py", "line1\nline2\nline3\nline4\nline5")]  # a.py is the window's

