"""The tiny default policy's tokenizer: options the envs ask for (isolated symbols, case folding, size)."""

from creditflow.config import build_config
from creditflow.envs import make
from creditflow.policy.factory import tiny_vocab_size
from creditflow.policy.tiny import train_tokenizer

CORPUS = ["Back to Search [SEP] B07G43PAFX [SEP] Pellham Face Moisturizer - Hyaluronic Acid [SEP] $26.63",
          "i am looking for a face moisturizer, with size: 2.5 oz", "click[b07g43pafx]", "search[face moisturizer]",
          "#__O#\n#PX_#"] * 20


def test_lowercase_reads_an_id_the_same_in_either_case_and_keeps_special_tokens():
    tok = train_tokenizer(CORPUS, vocab_size=400, lowercase=True)
    assert tok.tokenize("B07G43PAFX Face") == tok.tokenize("b07g43pafx face")
    ids = tok.apply_chat_template([{"role": "user", "content": "Buy It"},
                                   {"role": "assistant", "content": "<think></think><action>click[Buy Now]</action>"}],
                                  tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    text = tok.decode(ids)
    assert "<|im_start|>assistant" in text and "<action>click[buy now]</action><|im_end|>" in text
    assert "buy it" in text
    for special in ("<think>", "</think>", "<action>", "</action>", "<|im_end|>"):
        assert tok.convert_tokens_to_ids(special) in ids


def test_without_lowercase_case_is_kept():
    tok = train_tokenizer(CORPUS, vocab_size=400)
    assert tok.tokenize("B07G43PAFX") != tok.tokenize("b07g43pafx")
    assert tok.decode(tok("Face").input_ids) == "Face"


def test_isolated_chars_are_tokens_of_their_own():
    tok = train_tokenizer(CORPUS, vocab_size=400, isolate_chars="#_OXP")
    assert tok.tokenize("#__O#") == ["#", "_", "_", "O", "#"]


def test_tiny_vocab_size_comes_from_config_then_env_then_1024():
    webshop, sokoban = make("webshop", num_products=50), make("sokoban")
    assert tiny_vocab_size(build_config(None, []).policy, webshop) == 4096
    assert tiny_vocab_size(build_config(None, []).policy, sokoban) == 1024
    assert tiny_vocab_size(build_config(None, ["policy.tiny_vocab_size=512"]).policy, webshop) == 512


def test_words_are_one_token_each_wherever_they_occur_and_survive_saving(tmp_path):
    from transformers import AutoTokenizer

    tok = train_tokenizer(CORPUS, vocab_size=400, lowercase=True, words=["b07g43pafx", "b0bq50qb5r"])
    page = tok("[SEP] B07G43PAFX [SEP] B0BQ50QB5R", add_special_tokens=False).input_ids
    click = tok("click[b07g43pafx]", add_special_tokens=False).input_ids
    one = tok.convert_tokens_to_ids("b07g43pafx")
    assert one in page and one in click and tok.convert_tokens_to_ids("b0bq50qb5r") in page
    assert tok.decode(click) == "click[b07g43pafx]"
    tok.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(str(tmp_path))("click[B07G43PAFX]", add_special_tokens=False).input_ids == click


def test_webshop_asks_for_its_product_ids_as_words_on_small_catalogs():
    env = make("webshop", num_products=50)
    assert len(env.tokenizer_words) == 50 and all(w == w.lower() and len(w) == 10 for w in env.tokenizer_words)
    env.WHOLE_ID_TOKENS_UP_TO = 10
    assert env.tokenizer_words == []
