
(function(){
var q0=(location.hash.match(/[#&]q=([^&]*)/)||[])[1];q0=q0?decodeURIComponent(q0):'';
document.querySelectorAll('[data-pager]').forEach(function(box){
var rows=JSON.parse(document.getElementById(box.getAttribute('data-pager')).textContent);
var body=box.querySelector('tbody'),info=box.querySelector('.pinfo'),q=box.querySelector('input'),
sel=box.querySelector('select'),size=+box.getAttribute('data-size')||50,page=0,shown=rows,
make=(window.DOCMILL_ROWS||{})[box.id];
function draw(){var n=Math.max(1,Math.ceil(shown.length/size));page=Math.min(Math.max(page,0),n-1);
body.innerHTML=shown.slice(page*size,(page+1)*size).map(function(r){
return typeof r[2]==='string'?r[2]:make(r[2]);}).join('');
info.textContent=shown.length+' of '+rows.length+' · page '+(page+1)+' of '+n;}
function filter(){var t=q.value.toLowerCase(),s=sel?sel.value:'';shown=rows.filter(function(r){
return(!t||r[0].indexOf(t)>=0)&&(!s||r[1]===s);});page=0;draw();}
q.addEventListener('input',filter);if(sel)sel.addEventListener('change',filter);
box.querySelector('.prev').addEventListener('click',function(){page--;draw();});
box.querySelector('.next').addEventListener('click',function(){page++;draw();});
if(q0){q.value=q0;}filter();});
})();
