// kubetrail serve: expand and collapse the tree. Loaded from this server ('self'): the pages
// carry no inline script, and their Content-Security-Policy allows none.
(function () {
  var all = function () { return document.querySelectorAll('#tree details'); };
  var on = function (id, fn) { var e = document.getElementById(id); if (e) { e.addEventListener('click', fn); } };
  on('expand', function () { all().forEach(function (d) { d.open = true; }); });
  on('collapse', function () { all().forEach(function (d) { d.open = false; }); });
  document.body.setAttribute('data-rendered', 'true');
})();
