// The chat panel: a conversation with a loaded model through POST
// /v1/messages, streamed; thinking folded, an image attached where the model
// has a projector, a stop button, and under each answer the figures the
// REPL prints (tokens, tokens per second, first token, context).
import { auth, h, int, readEvents, secs, setText } from "./util.js";

const MAX_TOKENS = 1024;
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

// One line, as `engy chat` prints it (commands/repl/view.py stats_line).
export function statsLine({ stopped, stop, tokens, generating, firstToken, used, window }) {
  const parts = [];
  if (stopped) parts.push("stopped");
  else if (stop === "max_tokens") parts.push("cut at the token limit");
  parts.push(`${int(tokens)} tokens`);
  if (tokens > 1 && generating > 0) parts.push(`${((tokens - 1) / generating).toFixed(1)} tok/s`);
  if (firstToken !== null) parts.push(`first token ${firstToken.toFixed(2)} s`);
  if (window) parts.push(`context ${int(used)}/${int(window)} (${Math.round((100 * used) / window)}%)`);
  else parts.push(`context ${int(used)}`);
  return parts.join(" · ");
}

export function createChat(root, { models, notify }) {
  const history = []; // {role, content (wire blocks), view}
  let running = null; // {controller}
  let image = null; // {media_type, data, url, name}

  const select = h("select", { id: "chat-model", "aria-label": "Model" });
  const think = h("select", { id: "chat-thinking", "aria-label": "Thinking" },
    h("option", { value: "", text: "thinking: model default" }),
    h("option", { value: "on", text: "thinking: on" }),
    h("option", { value: "off", text: "thinking: off" }));
  const maxTokens = h("input", { id: "chat-max", type: "number", min: 1, max: 65536, step: 1, value: MAX_TOKENS, inputmode: "numeric", "aria-label": "Max tokens" });
  const log = h("div", { class: "chat-log", id: "chat-log", role: "log", "aria-live": "polite", "aria-label": "Conversation" });
  const input = h("textarea", { id: "chat-input", rows: 3, placeholder: "Message (Enter sends, Shift+Enter: new line)", "aria-label": "Message" });
  const fileInput = h("input", { type: "file", accept: IMAGE_TYPES.join(","), id: "chat-file", class: "visually-hidden", tabindex: "-1" });
  const attach = h("button", { type: "button", id: "chat-attach", class: "secondary", text: "Attach image" });
  const attached = h("span", { class: "chat-attached", id: "chat-attached" });
  const send = h("button", { type: "submit", id: "chat-send", text: "Send" });
  const stop = h("button", { type: "button", id: "chat-stop", class: "danger", text: "Stop", disabled: true });
  const clear = h("button", { type: "button", id: "chat-clear", class: "secondary", text: "New chat" });
  const hint = h("p", { class: "muted small", id: "chat-hint" });

  const form = h("form", { class: "composer", id: "chat-form" },
    input,
    h("div", { class: "composer-row" }, attach, fileInput, attached, h("span", { class: "grow" }), clear, stop, send));
  root.append(
    h("div", { class: "chat-head" }, h("label", { class: "field" }, h("span", { text: "Model" }), select),
      h("label", { class: "field" }, h("span", { text: "Thinking" }), think),
      h("label", { class: "field narrow" }, h("span", { text: "Max tokens" }), maxTokens), hint),
    log, form);

  function current() {
    return models().find((m) => m.id === select.value);
  }

  function refreshModels() {
    const list = models();
    const keep = select.value;
    const ids = list.map((m) => m.id);
    if (ids.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
      select.replaceChildren(...list.map((m) => h("option", { value: m.id, text: m.loaded ? m.id : `${m.id} (loads on first use)` })));
    }
    if (ids.includes(keep)) select.value = keep;
    else {
      const loaded = list.find((m) => m.loaded);
      if (loaded) select.value = loaded.id;
    }
    const m = current();
    attach.hidden = !(m && m.images);
    if (!attach.hidden) hint.textContent = "";
    else hint.textContent = m ? "" : "No model to talk to.";
    if (attach.hidden && image) dropImage();
  }

  function dropImage() {
    if (image) URL.revokeObjectURL(image.url);
    image = null;
    attached.replaceChildren();
  }

  attach.addEventListener("click", () => fileInput.click());
  fileInput.addEventListener("change", async () => {
    const file = fileInput.files[0];
    fileInput.value = "";
    if (!file) return;
    if (!IMAGE_TYPES.includes(file.type)) {
      notify(`${file.name}: not a PNG, JPEG, GIF or WebP image`);
      return;
    }
    const data = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result).split(",", 2)[1]);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
    dropImage();
    image = { media_type: file.type, data, url: URL.createObjectURL(file), name: file.name };
    attached.replaceChildren(
      h("img", { src: image.url, alt: `attached: ${file.name}`, class: "thumb" }),
      h("span", { text: file.name }),
      h("button", { type: "button", class: "link", "aria-label": `Remove ${file.name}`, text: "remove", onclick: dropImage }));
  });

  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  clear.addEventListener("click", () => {
    if (running) running.controller.abort();
    history.length = 0;
    log.replaceChildren();
    input.focus();
  });
  stop.addEventListener("click", () => running?.controller.abort());
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text || running) return;
    const model = current();
    if (!model) {
      notify("No model to talk to: load one on the Models panel");
      return;
    }
    input.value = "";
    ask(model, text);
  });

  function bubble(role, ...children) {
    const el = h("div", { class: `msg ${role}` }, h("div", { class: "who", text: role === "user" ? "You" : select.value }), ...children);
    log.append(el);
    log.scrollTop = log.scrollHeight;
    return el;
  }

  async function ask(model, text) {
    const content = [];
    if (image) content.push({ type: "image", source: { type: "base64", media_type: image.media_type, data: image.data } });
    content.push({ type: "text", text });
    bubble("user", image ? h("img", { src: image.url, alt: `attached: ${image.name}`, class: "thumb" }) : null, h("div", { class: "text", text }));
    image = null;
    attached.replaceChildren();
    history.push({ role: "user", content });

    const thinkingBox = h("details", { class: "thinking", hidden: true }, h("summary", { text: "Thinking" }), h("div", { class: "text" }));
    const answer = h("div", { class: "text answer" });
    const stats = h("div", { class: "stats", role: "status", text: "waiting for the model…" });
    const view = bubble("assistant", thinkingBox, answer, stats);
    view.dataset.state = "running";

    const blocks = []; // what goes back next turn: thinking (with signature) and text
    const limit = Math.max(1, Math.floor(Number(maxTokens.value)) || MAX_TOKENS);
    const body = { model: model.id, max_tokens: limit, stream: true, messages: history.map((m) => ({ role: m.role, content: m.content })) };
    if (think.value) body.thinking = think.value === "on" ? { type: "enabled", budget_tokens: 1024 } : { type: "disabled" };

    const controller = new AbortController();
    running = { controller };
    send.disabled = true;
    stop.disabled = false;
    const asked = performance.now();
    let first = null;
    let pieces = 0;
    let usage = null;
    let stopReason = null;
    let promptTokens = 0;
    let failed = null;
    const tick = setInterval(() => {
      if (first === null) setText(stats, `waiting for the model… ${secs((performance.now() - asked) / 1000)}`);
    }, 250);
    try {
      const response = await fetch("/v1/messages", {
        method: "POST",
        headers: auth.headers({ "content-type": "application/json", "anthropic-version": "2023-06-01", "x-engy-client": "page" }),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) {
        let message = `HTTP ${response.status}`;
        try { message = (await response.json()).error.message; } catch { /* keep it */ }
        throw new Error(message);
      }
      await readEvents(response, (name, data) => {
        if (name === "message_start") promptTokens = data.message?.usage?.input_tokens ?? 0;
        else if (name === "content_block_start") {
          const type = data.content_block?.type;
          blocks[data.index] = type === "thinking" ? { type: "thinking", thinking: "", signature: "" } : type === "text" ? { type: "text", text: "" } : null;
        } else if (name === "content_block_delta") {
          const d = data.delta;
          const block = blocks[data.index];
          if (first === null && (d.type === "text_delta" || d.type === "thinking_delta")) first = performance.now();
          if (d.type === "text_delta") {
            pieces += 1;
            if (block) block.text += d.text;
            answer.textContent += d.text;
          } else if (d.type === "thinking_delta") {
            pieces += 1;
            if (block) block.thinking += d.thinking;
            thinkingBox.hidden = false;
            thinkingBox.lastChild.textContent += d.thinking;
          } else if (d.type === "signature_delta" && block) block.signature = d.signature;
          if (first !== null) setText(stats, `${pieces} tokens · ${pieces > 1 ? ((pieces - 1) / ((performance.now() - first) / 1000)).toFixed(1) : "–"} tok/s`);
          log.scrollTop = log.scrollHeight;
        } else if (name === "message_delta") {
          stopReason = data.delta?.stop_reason ?? null;
          usage = data.usage ?? null;
        } else if (name === "error") {
          throw new Error(data.error?.message || "the server reported an error");
        }
      }, controller.signal);
    } catch (err) {
      if (!controller.signal.aborted) failed = err.message || String(err);
    } finally {
      clearInterval(tick);
      running = null;
      send.disabled = false;
      stop.disabled = true;
    }
    const ended = performance.now();
    const stopped = controller.signal.aborted;
    const tokens = usage ? usage.output_tokens : pieces;
    const used = usage ? usage.input_tokens + (usage.cache_read_input_tokens || 0) + usage.output_tokens : promptTokens + pieces;
    view.dataset.state = failed ? "failed" : stopped ? "stopped" : "done";
    if (failed) {
      stats.textContent = `error: ${failed}`;
      stats.classList.add("error");
    } else {
      stats.textContent = statsLine({
        stopped, stop: stopReason, tokens,
        generating: first === null ? 0 : (ended - first) / 1000,
        firstToken: first === null ? null : (first - asked) / 1000,
        used, window: model.context_length,
      });
    }
    const kept = blocks.filter((b) => b && ((b.type === "text" && b.text) || (b.type === "thinking" && b.thinking && b.signature)));
    if (kept.some((b) => b.type === "text")) history.push({ role: "assistant", content: kept });
    else history.pop(); // nothing came back: the question is not part of the conversation
    input.focus();
  }

  return { refresh: refreshModels, busy: () => running !== null };
}
