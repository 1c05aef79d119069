// Thin fetch wrapper: adds the bearer token (kept in this tab only) and turns 4xx/5xx into
// ApiError with the server's `detail` (a string, or FastAPI's list of {loc, msg}).

const TOKEN_KEY = "spectune-token";

export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : `HTTP ${status}`);
    this.status = status;
    this.detail = detail;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export async function api(path, { method = "GET", body, params } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await r.json();
  } catch {
    data = null;
  }
  // RFC 9457 problem+json: a 422 names its fields in `errors`, every other error has `detail`.
  if (!r.ok) throw new ApiError(r.status, data && Array.isArray(data.errors) ? data.errors : data && "detail" in data ? data.detail : r.statusText);
  return data;
}

// FastAPI's 422 list as "field.path: message" lines (the leading "body"/"query" dropped).
export function fieldErrors(err) {
  if (!(err instanceof ApiError)) return [String(err)];
  if (!Array.isArray(err.detail)) return [String(err.detail)];
  return err.detail.map((e) => {
    const loc = (e.loc || []).slice(1).join(".");
    return loc ? `${loc}: ${e.msg}` : e.msg;
  });
}
