// The ragagent chat widget: a question box that streams cited answers over Connect.
//
// Embedding (docs/clients.md, "From a browser"): one module script from the ragagent server
// and, optionally, an element to mount in:
//
//   <div id="ragagent-chat"></div>
//   <script type="module" src="https://ragagent.example.com/widget.js"></script>
//
// The server is the script's own origin unless data-base-url says otherwise; data-api-key
// sends a key (for keys meant to be public: anything in a page is). Without the element the
// widget opens as a panel in the corner of the page.

import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AgentService, type AskStreamResponse, ResponseStatus } from "./gen/ragagent/v1/agent_pb";
import { type SourceInfo, type ToolCallInfo, ToolCallStatus } from "./gen/ragagent/v1/types_pb";
import { STYLE } from "./style";

export interface ChatOptions {
  /** The ragagent HTTP listener (RAGAGENT_HTTP_ADDRESS); the script's origin by default. */
  baseUrl: string;
  /** Sent as "authorization: Bearer <key>" when the server requires keys. */
  apiKey?: string;
  /** The heading of the panel. */
  title?: string;
}

const SESSION_KEY = "ragagent-chat-session";

/** Mounts a chat in `host`; returns a function that removes it. */
export function mountChat(host: HTMLElement, options: ChatOptions): () => void {
  injectStyle();
  const auth: Interceptor = (next) => async (req) => {
    if (options.apiKey) req.header.set("authorization", `Bearer ${options.apiKey}`);
    return next(req);
  };
  const client = createClient(
    AgentService,
    createConnectTransport({
      baseUrl: options.baseUrl,
      useBinaryFormat: true,
      interceptors: [auth],
    }),
  );
  const root = element("section", "ragagent-chat");
  root.setAttribute("aria-label", options.title ?? "Ask the book");
  const heading = element("header", "ragagent-head");
  heading.append(element("span", "ragagent-title", options.title ?? "Ask the book"));
  const reset = element("button", "ragagent-reset", "New conversation") as HTMLButtonElement;
  reset.type = "button";
  heading.append(reset);
  const log = element("div", "ragagent-log");
  log.setAttribute("aria-live", "polite");
  const form = element("form", "ragagent-form") as HTMLFormElement;
  const input = element("input", "ragagent-input") as HTMLInputElement;
  input.name = "question";
  input.placeholder = "Ask a question about the book";
  input.maxLength = 1000;
  input.autocomplete = "off";
  const send = element("button", "ragagent-send", "Ask") as HTMLButtonElement;
  send.type = "submit";
  form.append(input, send);
  root.append(heading, log, form);
  host.append(root);

  let sessionId = sessionStorage.getItem(SESSION_KEY) ?? "";
  let running: AbortController | null = null;

  reset.addEventListener("click", () => {
    running?.abort();
    sessionId = "";
    sessionStorage.removeItem(SESSION_KEY);
    log.replaceChildren();
    input.focus();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (running) {
      running.abort(); // the Ask button is a Stop button while an answer streams
      return;
    }
    const question = input.value.trim();
    if (!question) return;
    input.value = "";
    void ask(question);
  });
  const onLeave = () => running?.abort();
  window.addEventListener("pagehide", onLeave);

  async function ask(question: string): Promise<void> {
    const turn = new Turn(log, question);
    const controller = (running = new AbortController());
    send.textContent = "Stop";
    root.dataset.state = "streaming";
    try {
      const stream = client.askStream(
        { query: question, sessionId },
        { signal: controller.signal, timeoutMs: 120_000 },
      );
      for await (const event of stream) {
        const id = turn.see(event);
        if (id && id !== sessionId) {
          sessionId = id;
          sessionStorage.setItem(SESSION_KEY, id);
        }
      }
      turn.done();
    } catch (error) {
      turn.fail(explain(ConnectError.from(error)));
    } finally {
      running = null;
      send.textContent = "Ask";
      root.dataset.state = "idle";
      input.focus();
    }
  }

  return () => {
    running?.abort();
    window.removeEventListener("pagehide", onLeave);
    root.remove();
  };
}

/** One question and its answer as they arrive. */
class Turn {
  private readonly answer: HTMLElement;
  private readonly tools: HTMLElement;
  private readonly sources: HTMLElement;
  private readonly status: HTMLElement;
  private text = "";
  private readonly byCitation = new Map<number, SourceInfo>();
  private readonly toolRows = new Map<string, HTMLElement>();
  private readonly toolCalls = new Map<string, ToolCallInfo>();
  private readonly foundBy = new Map<string, number>();

  constructor(log: HTMLElement, question: string) {
    const turn = element("article", "ragagent-turn");
    turn.append(element("p", "ragagent-question", question));
    this.tools = element("ul", "ragagent-tools");
    this.answer = element("div", "ragagent-answer");
    this.status = element("p", "ragagent-status", "Thinking…");
    this.sources = element("ol", "ragagent-sources");
    turn.append(this.tools, this.answer, this.status, this.sources);
    log.append(turn);
    turn.scrollIntoView({ block: "end" });
  }

  /** Shows one event; returns the session id when the event names it. */
  see(event: AskStreamResponse): string | undefined {
    const e = event.event;
    switch (e.case) {
      case "runStarted":
        return e.value.sessionId;
      case "toolCallStarted":
      case "toolCallCompleted":
        this.tool(e.value);
        break;
      case "sourcesFound": {
        for (const source of e.value.sources) this.addSource(source);
        const id = e.value.toolCallId;
        this.foundBy.set(id, (this.foundBy.get(id) ?? 0) + e.value.sources.length);
        const call = this.toolCalls.get(id);
        if (call) this.tool(call);
        break;
      }
      case "answerDelta":
        this.text += e.value.text;
        this.status.textContent = "";
        this.render();
        break;
      case "heartbeat":
        if (!this.text) this.status.textContent = `Still working (${e.value.phase || "thinking"})…`;
        break;
      case "completed":
        this.text = e.value.answer;
        for (const source of e.value.sources) this.addSource(source);
        this.render();
        this.showCited(e.value.sources);
        this.status.textContent = completedNote(e.value.status);
        return e.value.sessionId;
    }
    return undefined;
  }

  done(): void {
    this.answer.parentElement?.setAttribute("data-done", "true");
  }

  fail(message: string): void {
    this.status.textContent = message;
    this.status.className = "ragagent-status ragagent-error";
    this.status.setAttribute("role", "alert");
    this.done();
  }

  private tool(call: ToolCallInfo): void {
    this.toolCalls.set(call.id, call);
    let row = this.toolRows.get(call.id);
    if (!row) {
      row = element("li", "ragagent-tool");
      this.toolRows.set(call.id, row);
      this.tools.append(row);
    }
    const query = call.arguments?.query;
    const what = typeof query === "string" ? ` for “${query}”` : "";
    const found = this.foundBy.get(call.id);
    const count = found === undefined ? "" : ` — ${found} passage${found === 1 ? "" : "s"}`;
    const done = call.status === ToolCallStatus.COMPLETED;
    const failed = call.status === ToolCallStatus.ERROR || call.status === ToolCallStatus.TIMEOUT;
    row.textContent = failed
      ? `The search${what} failed`
      : `${done ? "Searched" : "Searching"} the book${what}${done ? count : "…"}`;
    row.dataset.status = String(call.status);
  }

  private addSource(source: SourceInfo): void {
    const number = source.citation || this.byCitation.size + 1;
    if (!this.byCitation.has(number)) this.byCitation.set(number, source);
  }

  /** The answer with each [n] a link to source n's page (text only, never HTML). */
  private render(): void {
    const parts: Node[] = [];
    let last = 0;
    for (const match of this.text.matchAll(/\[(\d+)\]/g)) {
      const source = this.byCitation.get(Number(match[1]));
      if (!source?.url) continue;
      parts.push(document.createTextNode(this.text.slice(last, match.index)));
      const link = element("a", "ragagent-cite", match[0]) as HTMLAnchorElement;
      link.href = source.url;
      link.target = "_blank";
      link.rel = "noopener";
      link.title = source.title || source.url;
      parts.push(link);
      last = (match.index ?? 0) + match[0].length;
    }
    parts.push(document.createTextNode(this.text.slice(last)));
    this.answer.replaceChildren(...parts);
  }

  private showCited(sources: SourceInfo[]): void {
    const cited = sources.filter((s) => s.cited && s.url);
    this.sources.replaceChildren(
      ...cited.map((source) => {
        const item = element("li", "ragagent-source") as HTMLLIElement;
        item.value = source.citation;
        const link = element("a", "", source.title || source.url) as HTMLAnchorElement;
        link.href = source.url;
        link.target = "_blank";
        link.rel = "noopener";
        item.append(link);
        if (source.heading && source.heading !== source.title) {
          item.append(document.createTextNode(` — ${source.heading}`));
        }
        return item;
      }),
    );
  }
}

function completedNote(status: ResponseStatus): string {
  switch (status) {
    case ResponseStatus.NO_ANSWER:
      return "The book has nothing on this that is close enough to answer from.";
    case ResponseStatus.TIMEOUT:
      return "The answer ran out of time; this is what it had so far.";
    case ResponseStatus.CANCELLED:
      return "The answer was stopped; this is what it had so far.";
    case ResponseStatus.ERROR:
      return "Something went wrong while answering; this is what it had so far.";
    default:
      return "";
  }
}

/** What a person should read for an error: what happened and what they can do. */
export function explain(error: ConnectError): string {
  const id = error.metadata.get("x-request-id");
  const ref = id ? ` (reference ${id})` : "";
  switch (error.code) {
    case Code.Canceled:
      return "Stopped.";
    case Code.Unauthenticated:
      return "This assistant needs an access key, and none (or a wrong one) was given. Ask the site's owner for access.";
    case Code.PermissionDenied:
      return "Your access key does not allow asking questions here.";
    case Code.ResourceExhausted:
      return "Too many questions at once. Wait a moment and ask again.";
    case Code.InvalidArgument:
      return `The question could not be asked: ${error.rawMessage}`;
    case Code.DeadlineExceeded:
      return "The answer took too long. Try again, or ask a shorter question.";
    case Code.Unavailable:
    case Code.Unknown:
      return `The assistant cannot be reached right now. Check your connection and try again${ref}.`;
    case Code.FailedPrecondition:
      return `The assistant is not set up to answer yet${ref}.`;
    default:
      return `Something went wrong on the server${ref}. Please try again later.`;
  }
}

function element(tag: string, className: string, text?: string): HTMLElement {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function injectStyle(): void {
  if (document.getElementById("ragagent-chat-style")) return;
  const style = document.createElement("style");
  style.id = "ragagent-chat-style";
  style.textContent = STYLE;
  document.head.append(style);
}

/** Mounts in #ragagent-chat (or [data-ragagent-chat]), else in a corner panel. */
function autoMount(): void {
  const script = document.querySelector<HTMLScriptElement>("script[src$='widget.js']");
  const host =
    document.querySelector<HTMLElement>("#ragagent-chat, [data-ragagent-chat]") ??
    document.body.appendChild(element("div", "ragagent-floating"));
  const data = { ...script?.dataset, ...host.dataset };
  mountChat(host, {
    baseUrl: data.baseUrl ?? new URL(import.meta.url).origin,
    apiKey: data.apiKey,
    title: data.title,
  });
}

if (typeof document !== "undefined" && !document.querySelector("[data-ragagent-manual]")) {
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", autoMount, { once: true });
  } else {
    autoMount();
  }
}
