// The widget's look: small, readable, and scoped to .ragagent-* so a host page is untouched.
export const STYLE = `
.ragagent-chat{font:15px/1.5 system-ui,sans-serif;color:#1c1e21;background:#fff;border:1px solid #d0d7de;
  border-radius:10px;display:flex;flex-direction:column;max-height:70vh;min-height:18rem;overflow:hidden}
.ragagent-head{display:flex;justify-content:space-between;align-items:center;padding:.5rem .8rem;
  background:#f6f8fa;border-bottom:1px solid #d0d7de}
.ragagent-title{font-weight:600}
.ragagent-reset{font:inherit;font-size:.8rem;background:none;border:1px solid #d0d7de;border-radius:6px;
  padding:.15rem .5rem;cursor:pointer}
.ragagent-log{flex:1;overflow-y:auto;padding:.6rem .8rem}
.ragagent-turn{margin-bottom:1rem}
.ragagent-question{font-weight:600;margin:.2rem 0}
.ragagent-tools{list-style:none;margin:.2rem 0;padding:0;color:#57606a;font-size:.85rem}
.ragagent-tool::before{content:"\\25B8  "}
.ragagent-answer{white-space:pre-wrap;margin:.3rem 0}
.ragagent-cite{font-size:.8em;vertical-align:super;text-decoration:none;margin:0 .1em}
.ragagent-status{color:#57606a;font-size:.85rem;margin:.2rem 0}
.ragagent-status:empty{display:none}
.ragagent-error{color:#b42318;background:#fef3f2;border-radius:6px;padding:.4rem .6rem}
.ragagent-sources{font-size:.85rem;margin:.3rem 0 0 1.2rem;padding:0}
.ragagent-form{display:flex;gap:.4rem;padding:.6rem .8rem;border-top:1px solid #d0d7de}
.ragagent-input{flex:1;font:inherit;padding:.4rem .6rem;border:1px solid #d0d7de;border-radius:6px}
.ragagent-send{font:inherit;padding:.4rem .9rem;border:0;border-radius:6px;background:#2e8555;color:#fff;cursor:pointer}
.ragagent-floating{position:fixed;right:1rem;bottom:1rem;width:min(26rem,calc(100vw - 2rem));z-index:1000;
  box-shadow:0 6px 24px rgba(0,0,0,.15);border-radius:10px}
`;
