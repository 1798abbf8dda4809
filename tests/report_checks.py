"""Test-only page hooks for the browser tests: they record each figure's render status into the
DOM (read through chromium's --dump-dom), so errors in figures show up without a DevTools
connection. Added to a page by the test, never shipped in a report."""

from __future__ import annotations

# In <head>, before any figure: collect uncaught errors and console.error calls.
CAPTURE = """<script>
window.tlmsearchErrors=[];
window.addEventListener('error',function(e){window.tlmsearchErrors.push(String(e.message||e));});
(function(){var ce=console.error;console.error=function(){
  window.tlmsearchErrors.push(Array.prototype.join.call(arguments,' '));
  return ce.apply(console,arguments);};})();
</script>"""
# Before </body>: the status of every plot div, on load and after each live redraw (the
# dashboard dispatches 'tlmsearch-redrawn').
CHECK = """<pre id="render-status" style="display:none">pending</pre>
<script>
window.tlmsearchCheck=function(){
  var divs=document.querySelectorAll('div.plotly-graph-div'), rendered=[], empty=[];
  divs.forEach(function(d){
    var ok=d._fullLayout&&d.querySelector('.main-svg')&&d.getBoundingClientRect().height>0;
    (ok?rendered:empty).push(d.id);});
  document.getElementById('render-status').textContent=JSON.stringify(
    {figures:divs.length,rendered:rendered,empty:empty,errors:window.tlmsearchErrors,
     plotly:typeof Plotly!=='undefined'});
};
document.addEventListener('tlmsearch-redrawn',window.tlmsearchCheck);
if(document.readyState==='complete'){tlmsearchCheck();}
else{window.addEventListener('load',tlmsearchCheck);}
</script>
"""
HEAD = "<meta charset='utf-8'>"


def with_checks(page: str) -> str:
    """``page`` with :data:`CAPTURE` first in its head and :data:`CHECK` last in its body."""
    assert HEAD in page and "</body>" in page, "not a tlmsearch page"
    head, _, rest = page.partition(HEAD)
    body, _, tail = rest.rpartition("</body>")
    return f"{head}{HEAD}{CAPTURE}{body}{CHECK}</body>{tail}"
